# Tidy scdoc's roff for mandoc -Tlint and groff -ww: drop the paragraph
# macros scdoc puts right after section headings, fold filled text lines
# over 80 bytes (mandoc warns on both; groff and mandoc render the result the
# same), and write the non-ASCII characters the pages use as roff's named
# characters (groff reads its input as Latin-1 and warns on raw UTF-8).
BEGIN {
	named["×"] = "\\(mu"; named["–"] = "\\(en"; named["—"] = "\\(em"
	named["→"] = "\\(->"; named["≤"] = "\\(<="; named["≥"] = "\\(>="
	named["·"] = "\\(md"
}
{ for (c in named) gsub(c, named[c]) }
function emit(s,    i, cut) {
	while (!nofill && length(s) > 80) {
		cut = 0
		for (i = 80; i > 1; i--)
			if (substr(s, i, 1) == " " && substr(s, i - 1, 1) != "\\" &&
			    substr(s, i + 1, 1) !~ /[ .'\\]/) { cut = i; break }
		if (!cut) break
		print substr(s, 1, cut - 1); s = substr(s, cut + 1)
	}
	print s
}
/^\.P$/ { pending = 1; next }
/^\.S[HS] / { pending = 0; print; afterhead = 1; next }
/^\.RE$/ { print; next }
{ if (pending && !afterhead) print ".P"; pending = 0; afterhead = 0
  if ($0 ~ /^\.nf/) nofill = 1; if ($0 ~ /^\.fi/) nofill = 0
  if ($0 ~ /^[.']/) print; else emit($0) }
