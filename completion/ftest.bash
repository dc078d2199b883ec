# bash completion for ftest and ftrain: options, commands and enumerated
# values come from the program's own --help, models from `ftest models`, GPUs
# from `ftest gpus`, so the completion never lists what the program rejects.
# Installed as share/bash-completion/completions/{ftest,ftrain}.

# The words of an option's value list in --help: "--zero S  ZeRO stage 0 | 1 | 2 | 3 (0 = DDP)"
# gives 0 1 2 3; a list that ends a line with "|" goes on in the next line.
_ftest_values() {
    "$1" --help 2>/dev/null | awk -v opt="$2" '
        function words(line, first,    n, parts, i, m, w, j) {
            gsub(/\([^)]*\)/, "", line)
            n = split(line, parts, "|")
            for (i = 1; i <= n; i++) {
                m = split(parts[i], w, /[ ,;:]+/)
                if (i == 1 && first) {
                    # Before the first "|": the last word is the alternative ("stage 0").
                    for (j = m; j >= 1; j--) if (w[j] != "") { print w[j]; break }
                } else {
                    # After it: the first word ("int8: QLoRA ..." gives int8).
                    for (j = 1; j <= m; j++) if (w[j] != "") { print w[j]; break }
                }
            }
        }
        on && /\|/ { words($0, 0); on = $0 ~ /\| *$/; next }
        { on = 0 }
        # ftrain writes the values in place of the metavariable: "--zero 0|1|2|3".
        $1 == opt && $2 ~ /\|/ { n = split($2, v, "|"); for (i = 1; i <= n; i++) print v[i]; next }
        $1 == opt && index($0, "|") {
            line = $0; sub(/^ *[^ ]+ +[^ ]+ +/, "", line); sub(/^[a-z-]+: +/, "", line)
            words(line, 1); on = line ~ /\| *$/
        }'
}

# The parts of a comma list in --help: "--lora-targets T  comma list of q,k,v, or all-linear".
_ftest_list_values() {
    "$1" --help 2>/dev/null | awk -v opt="$2" '
        $1 == opt && /comma list of/ {
            line = $0; sub(/.*comma list of +/, "", line)
            n = split(line, w, /[ ,]+/)
            for (i = 1; i <= n; i++) if (w[i] != "" && w[i] != "or") print w[i]
        }'
}

# Does --help give the option a value ("--gpus N", "--seq N")? Then a word
# that is not one of its listed values is the user's to type, not a file.
_ftest_takes_value() {
    "$1" --help 2>/dev/null | awk -v opt="$2" '$1 == opt && $2 ~ /^[A-Z][A-Z|]*$/ { found = 1 } END { exit !found }'
}

_ftest_complete() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local prog=${COMP_WORDS[0]} ftest=${COMP_WORDS[0]}
    [[ ${prog##*/} == ftrain ]] && ftest=$(command -v ftest 2>/dev/null || echo "${prog%/*}/ftest")
    COMPREPLY=()
    case $prev in
    --model)
        # Shipped names, then config.json files, safetensors files and indexes,
        # and folders (a model folder, or one to go into).
        COMPREPLY=($(compgen -W "$("$ftest" models 2>/dev/null | awk 'NR > 1 { print $1 }')" -- "$cur"))
        COMPREPLY+=($(compgen -f -X '!*.json' -- "$cur") $(compgen -f -X '!*.safetensors' -- "$cur"))
        COMPREPLY+=($(compgen -d -- "$cur"))
        compopt -o filenames 2>/dev/null
        return ;;
    --gpu)
        COMPREPLY=($(compgen -W "$("$ftest" gpus 2>/dev/null | awk 'NR > 2 { print $1 }')" -- "$cur"))
        return ;;
    --stack)
        COMPREPLY=($(compgen -W "$("$ftest" stacks 2>/dev/null | awk 'NR > 1 { print $1 }')" -- "$cur"))
        return ;;
    --deepspeed-config|--csv|--svg|--records|--catalog|--data|--init|--record|--out|--axolotl|--accelerate-config|--dump-grads)
        COMPREPLY=($(compgen -f -- "$cur"))
        compopt -o filenames 2>/dev/null
        return ;;
    esac
    if [[ $prev == --* ]]; then
        local values
        values=$(_ftest_list_values "$prog" "$prev")
        if [[ -n $values ]]; then
            # A comma list: complete the part after the last comma.
            local head=""
            [[ $cur == *,* ]] && head=${cur%,*},
            COMPREPLY=($(compgen -P "$head" -W "$values" -- "${cur##*,}"))
            compopt -o nospace 2>/dev/null
            return
        fi
        values=$(_ftest_values "$prog" "$prev")
        if [[ -n $values ]]; then
            COMPREPLY=($(compgen -W "$values" -- "$cur"))
            return
        fi
        _ftest_takes_value "$prog" "$prev" && return
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
