# What an op-level checkpoint policy of torchtitan 0.2.0's form (every other
# aten.mm and SDPA saved; written here from its description, not its code)
# stores for one HF 4.49 LlamaDecoderLayer under torch 2.6.0
# (torch.utils.checkpoint with create_selective_checkpoint_contexts), on the
# CPU; the CPU's SDPA kernel stands in for the CUDA ones on the list.
import torch
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
cfg = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=1, max_position_embeddings=128)
cfg._attn_implementation = "sdpa"
layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
b, s = 1, 48
x = torch.randn(b, s, 64, dtype=torch.bfloat16, requires_grad=True)
pos = torch.arange(s)[None]
cos, sin = LlamaRotaryEmbedding(cfg)(x, pos)
SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
modes = []
def context_fn():
    count = {True: 0, False: 0}  # the forward's and the recompute's mm, apart
    def policy(ctx, func, *args, **kwargs):
        if func == torch.ops.aten.mm.default:
            count[ctx.is_recompute] += 1
            return CheckpointPolicy.PREFER_RECOMPUTE if count[ctx.is_recompute] % 2 == 0 else CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.MUST_SAVE if func in SAVE else CheckpointPolicy.PREFER_RECOMPUTE
    fwd, rec = create_selective_checkpoint_contexts(policy)
    modes.append(fwd)
    return fwd, rec
y = checkpoint(lambda x: layer(x, position_embeddings=(cos, sin), position_ids=pos)[0], x,
               use_reentrant=False, context_fn=context_fn)
total = 0
for func, outs in modes[0].storage.items():
    for out in outs:
        ts = out if isinstance(out, (tuple, list)) else (out,)
        for t in ts:
            v = getattr(t, "val", t)
            if isinstance(v, torch.Tensor):
                print(func, tuple(v.shape), v.dtype, v.numel() * v.element_size())
                total += v.numel() * v.element_size()
print("total", total)
y.sum().backward()
