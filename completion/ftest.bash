# bash completion for ftest and ftrain: options, commands and enumerated
# values come from the program's own --help, models from `ftest models`, GPUs
# from `ftest gpus`, so the completion never lists what the program rejects.
# Installed as share/bash-completion/completions/{ftest,ftrain}.

# The words of an option's value list in --help: "--precision P  fp32 | bf16 (default ...)".
_ftest_values() {
    "$1" --help 2>/dev/null | awk -v opt="$2" '
        $1 == opt && index($0, "|") {
            line = $0; sub(/^ *[^ ]+ +[^ ]+ +/, "", line); gsub(/\([^)]*\)/, "", line); sub(/^[a-z-]+: +/, "", line)
            n = split(line, parts, "|")
            # Each alternative is its first word: "int8: QLoRA..." gives int8.
            for (i = 1; i <= n; i++) { m = split(parts[i], w, /[ ,;:]+/); for (j = 1; j <= m; j++) if (w[j] != "") { print w[j]; break } }
        }'
}

_ftest_complete() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local prog=${COMP_WORDS[0]} ftest=${COMP_WORDS[0]}
    [[ ${prog##*/} == ftrain ]] && ftest=$(command -v ftest 2>/dev/null || echo "${prog%/*}/ftest")
    COMPREPLY=()
    case $prev in
    --model)
        COMPREPLY=($(compgen -W "$("$ftest" models 2>/dev/null | awk 'NR > 1 { print $1 }')" -- "$cur"))
        COMPREPLY+=($(compgen -f -X '!*.json' -- "$cur"))
        return ;;
    --gpu)
        COMPREPLY=($(compgen -W "$("$ftest" gpus 2>/dev/null | awk 'NR > 2 { print $1 }')" -- "$cur"))
        return ;;
    --stack)
        COMPREPLY=($(compgen -W "$("$ftest" stacks 2>/dev/null | awk 'NR > 1 { print $1 }')" -- "$cur"))
        return ;;
    --deepspeed-config|--csv|--svg|--records|--catalog|--data|--init|--record|--out)
        COMPREPLY=($(compgen -f -- "$cur"))
        return ;;
    esac
    if [[ $prev == --* ]]; then
        local values
        values=$(_ftest_values "$prog" "$prev")
        if [[ -n $values ]]; then
            COMPREPLY=($(compgen -W "$values" -- "$cur"))
            return
        fi
    fi
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$("$prog" --help 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)" -- "$cur"))
        return
    fi
    if [[ $COMP_CWORD == 1 && ${prog##*/} != ftrain ]]; then
        # The commands: first words of the lines under "commands:" in --help.
        COMPREPLY=($(compgen -W "$("$prog" --help 2>/dev/null |
            awk '/^commands:/ { on = 1; next } /^$/ { on = 0 } on && $1 !~ /^\(/ { print $1 }')" -- "$cur"))
        return
    fi
    COMPREPLY=($(compgen -f -- "$cur"))
}
complete -F _ftest_complete ftest ftrain
