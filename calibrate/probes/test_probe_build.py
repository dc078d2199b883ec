"""Tests of the probe's model build (probe_run.build_model) on the CPU: the
random model must be the model from_pretrained would give, LM head tying
included. Needs torch and transformers (skipped without them); run with the
GPU image's versions: /tmp/probe-venv/bin/python -m unittest
calibrate/probes/test_probe_build.py

The expected parameter count is the published one, models/*.json's
"ftest.params" (the Hub's safetensors total), not the probe's output.
"""

import json
import os
import sys
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

import ftest_probe as fp  # noqa: E402


def published_params(name):
    with open(os.path.join(ROOT, "models", name + ".json"), encoding="utf-8") as f:
        return json.load(f)["ftest"]["params"]


def n_params(model):
    # parameters() yields a tied tensor once, as the safetensors total counts it
    return sum(p.numel() for p in model.parameters())


@unittest.skipUnless(HAVE_TORCH, "needs torch and transformers")
class TiedHead(unittest.TestCase):
    def build(self, *argv, device=None, fill=True, smoke=True):
        import probe_run
        a = fp.parse_args((["--smoke"] if smoke else []) + list(argv))
        hf_cfg = fp.model_config(a)
        if fill:
            return probe_run.build_model(a, hf_cfg, device)
        # The full model's random draw on the CPU's serial generator takes a
        # minute; the count and the tying need no values (built on "meta").
        with mock.patch.object(probe_run, "fill_random", lambda *x, **k: None):
            return probe_run.build_model(a, hf_cfg, device)

    def test_qwen_has_the_shipped_parameter_count(self):
        # Qwen2.5-0.5B ties its head (config tie_word_embeddings: true):
        # 494,032,768 published; 630,167,424 with a separate 151,936 x 896 head.
        m = self.build("--mode", "hf", "--model", "qwen2.5-0.5b", device="meta", fill=False)
        self.assertIs(m.lm_head.weight, m.model.embed_tokens.weight)
        self.assertEqual(n_params(m), published_params("qwen2.5-0.5b"))

    def test_llama32_1b_has_the_shipped_parameter_count(self):
        m = self.build("--mode", "hf", "--model", "llama3.2-1b", device="meta", fill=False)
        self.assertIs(m.lm_head.weight, m.model.embed_tokens.weight)
        self.assertEqual(n_params(m), published_params("llama3.2-1b"))

    def test_host_builds_of_deepspeed_and_fsdp_tie_too(self):
        # DeepSpeed (ZeRO 0-2, ZeRO-3 with --no-zero-init) and FSDP build on
        # the host, through the same no_init_weights path.
        for argv in (("--mode", "deepspeed", "--zero", "2"),
                     ("--mode", "deepspeed", "--zero", "3", "--no-zero-init"),
                     ("--mode", "fsdp2", "--zero", "3")):
            m = self.build(*argv, "--model", "qwen2.5-0.5b", "--layers", "1",
                           device="meta", fill=False, smoke=False)
            self.assertIs(m.lm_head.weight, m.model.embed_tokens.weight, argv)

    def test_filled_head_is_the_embedding(self):
        # A small tied config, built and filled for real on the CPU: one
        # tensor, so the head's values are the embedding's draw.
        import tempfile
        cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
               "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
               "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
               "tie_word_embeddings": True, "initializer_range": 0.02}
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        try:
            m = self.build("--mode", "hf", "--model", f.name)
        finally:
            os.unlink(f.name)
        self.assertIs(m.lm_head.weight, m.model.embed_tokens.weight)
        self.assertGreater(float(m.lm_head.weight.std()), 0.01)

    def test_untied_config_stays_untied(self):
        # Llama-3-8B's config does not tie: its head is its own tensor.
        m = self.build("--mode", "hf", "--model", "llama3-8b", "--layers", "1",
                       device="meta", fill=False)
        self.assertIsNot(m.lm_head.weight, m.model.embed_tokens.weight)


@unittest.skipUnless(HAVE_TORCH, "needs torch and transformers")
class CpuTruthTies(unittest.TestCase):
    def test_cpu_truth_builds_tied_shapes_tied(self):
        # make cpu-truth builds with plain from_config (no no_init_weights), so
        # post_init ties: its committed records of the tied shapes
        # (trace-frameworks-cpu.jsonl: qwen2, gemma2, llama-tied-bias) name at
        # their peak one model.embed_tokens.weight and no lm_head.weight.
        import cpu_truth_matrix
        import cpu_truth_setups
        for name in ("qwen2", "llama-tied-bias"):
            c = {"shape": cpu_truth_matrix.SHAPES[name], "attention": "eager",
                 "precision": "fp32", "checkpointing": "none"}
            m = cpu_truth_setups.build_model(c)
            self.assertIs(m.lm_head.weight, m.model.embed_tokens.weight, name)


if __name__ == "__main__":
    unittest.main()
