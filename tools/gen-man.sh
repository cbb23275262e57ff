#!/usr/bin/env bash
# Writes the man pages of the `tokenbox` command into DIR, made from its
# --help texts, so that they say what the command says:
#   tools/gen-man.sh TOKENBOX DIR VERSION
# tokenbox(1) is `tokenbox help`; tokenbox-CMD(1) is `tokenbox CMD --help`
# for each command it lists (but help and version).  The text is kept as
# it is printed (no-fill), with roff's special characters escaped.
# SOURCE_DATE_EPOCH, when set, dates the pages (reproducible builds).
set -euo pipefail
if (($# != 3)); then
	echo "usage: tools/gen-man.sh TOKENBOX DIR VERSION" >&2
	exit 2
fi
bin=$1 out=$2 version=$3
mkdir -p "$out"
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%d)

# Backslashes, then hyphens (so that options copy as typed), then lines
# that would start with a roff control character.
escape() {
	sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
}

# page NAME SUMMARY ARGS...: the page of `tokenbox ARGS...`.
page() {
	local name=$1 summary=$2 help usage
	shift 2
	help=$("$bin" "$@")
	usage=$(printf '%s\n' "$help" | sed -n '1s/^Usage: //p')
	{
		printf '.TH "%s" 1 "%s" "tokenbox %s" "User Commands"\n' \
			"${name^^}" "$date" "$version"
		printf '.SH NAME\n%s \\- %s\n' "$name" "$(printf '%s' "$summary" | escape)"
		printf '.SH SYNOPSIS\n.nf\n%s\n.fi\n' "$(printf '%s\n' "$usage" | escape)"
		printf '.SH DESCRIPTION\n.nf\n'
		printf '%s\n' "$help" | sed 1d | escape
		printf '.fi\n.SH SEE ALSO\n'
		if [[ $name == tokenbox ]]; then
			printf '%s\n' "${pages[@]}" | sed 's/$/(1)/' | paste -sd ' ' | escape
		else
			printf 'tokenbox(1)\n'
		fi
		printf '.PP\nThe documentation in docs/ of the tokenbox sources.\n'
	} >"$out/$name.1.tmp"
	mv "$out/$name.1.tmp" "$out/$name.1"
}

pages=()
cmds=()
while IFS=$'\t' read -r cmd summary; do
	[[ $cmd == help || $cmd == version ]] && continue
	cmds+=("$cmd")
	summaries+=("$summary")
	pages+=("tokenbox-$cmd")
done < <("$bin" help | awk '/^Commands:/ {on = 1; next} on && /^  [a-z]/ {
	name = $1; sub(/^  [^ ]+ +/, ""); print name "\t" $0 } on && /^$/ {on = 0}')
((${#cmds[@]})) || { echo "gen-man.sh: no commands in 'tokenbox help'" >&2; exit 1; }
for i in "${!cmds[@]}"; do
	page "tokenbox-${cmds[i]}" "${summaries[i]}" "${cmds[i]}" --help
done
page tokenbox "exactly-once message handling for Kafka consumer groups" help
