#!/usr/bin/env zsh
# zsh-complete.zsh DIR LINE: the words zsh's completion system offers at
# the end of the command line LINE, with the completion functions of DIR
# first on fpath; one a line, sorted.
#
# An interactive zsh without start-up files runs in a pseudo-terminal
# (zpty) with compinit; compadd is wrapped to print, after a marker, each
# word a call adds, and a widget bound to ^T completes the line and then
# prints an end marker.  Calls that only ask which words match (-O, -A,
# -D) add nothing and are passed on as they are.
emulate -L zsh
zmodload zsh/zpty || exit 2
local dir=$1 line=$2 out
zpty z zsh -f -i || exit 2
zpty -w z 'PS1= PS2= RPS1='
zpty -w z "fpath=(${(q)dir} \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compadd() {
	if (( ${@[(I)-[ODA]*]} )); then builtin compadd "$@"; return; fi
	local -a added
	builtin compadd -O added "$@"
	(( $#added )) && print -rn -- ${(j::)${(@)added/#/<m>}/%/$'"'"'\n'"'"'}
	builtin compadd "$@"
}'
zpty -w z 'nr-complete() { zle complete-word; print -rn -- "<end>"; }
zle -N nr-complete; bindkey "^T" nr-complete; print -r -- "<re""ady>"'
zpty -r z out '*<ready>*' || exit 2
zpty -w -n z "$line"$'\x14'
zpty -r z out '*<end>*' || exit 2
zpty -d z
print -r -- "${out//$'\r'/}" | grep -o '<m>.*' | sed 's/^<m>//' | LC_ALL=C sort -u
