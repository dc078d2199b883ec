/* Where --model points: a shipped name, a config.json, a model folder, a
 * .safetensors file, a model.safetensors.index.json, or ORG/NAME in the local
 * Hugging Face cache. Resolves to the config.json to load and, where there are
 * weights, reads their safetensors headers only (estimator/model/st_header.c). */
#ifndef EST_MODEL_SOURCE_H
#define EST_MODEL_SOURCE_H

#include <stdbool.h>
#include <stddef.h>

#include "st_header.h"

typedef struct est_model_source {
    char config[2048];     /* what to pass to ft_model_load */
    bool have_weights;     /* safetensors headers were read */
    est_st_summary weights;
    char origin[160];      /* "the Hugging Face cache" etc. for messages; "" for plain names */
} est_model_source;

/* The Hugging Face hub cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $HOME/.cache/huggingface/hub (huggingface_hub's constants.py). */
const char *est_hf_cache_dir(char *buf, size_t n);

/* True when `s` has the shape of a Hub repo id, ORG/NAME (what
 * est_model_source_resolve looks up in the cache). */
bool est_model_source_is_repo(const char *s);

/* The shipped model whose hf_repo is `repo` (case-insensitive): true with its
 * name in out. */
bool est_shipped_by_repo(const char *repo, char *out, size_t outlen);

/* 0 with `out` filled, or -1 with one line. ORG/NAME not in the cache falls
 * back to the shipped model of that repo. */
int est_model_source_resolve(const char *arg, est_model_source *out, char *err, size_t errlen);

#endif
