# Tidy scdoc's roff for mandoc -Tlint: drop the paragraph macros scdoc puts
# right after section headings, and fold filled text lines over 80 bytes
# (mandoc warns on both; groff and mandoc render the result the same).
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
