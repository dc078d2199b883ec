# Which tensors torch 2.6.0's min-cut partitioner saves for one HF 4.49
# LlamaDecoderLayer (bf16, SDPA, GQA 4/2), traced on the CPU: the cross-check
# of estimator/model/compile.c in docs/method.md ("torch.compile"). Needs
# torch 2.6.0, transformers 4.49 and networkx; run with that Python:
#   python calibrate/probes/compile_cut.py
# It prints the forward graph's outputs: the block's output, then what the
# backward receives (saved tensors, the primals it keeps, the weights'
# transposes).
import torch
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=1, attn_implementation="sdpa", max_position_embeddings=128)
cfg._attn_implementation = "sdpa"
layer = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16)
rot = LlamaRotaryEmbedding(cfg)
b, s = 1, 48
x = torch.randn(b, s, 64, dtype=torch.bfloat16, requires_grad=True)
pos = torch.arange(s)[None]
cos, sin = rot(x, pos)
saved = []
def fw(gm, inps):
    out = [n for n in gm.graph.nodes if n.op == "output"][0]
    for a in out.args[0]:
        if hasattr(a, "meta") and "val" in a.meta and isinstance(a.meta["val"], torch.Tensor):
            v = a.meta["val"]; saved.append((a.name, tuple(v.shape), str(v.dtype), v.numel() * v.element_size()))
    return gm.forward
def bw(gm, inps): return gm.forward
def backend(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=fw, bw_compiler=bw,
                                 partition_fn=min_cut_rematerialization_partition,
                                 decompositions=select_decomp_table())
f = torch.compile(lambda x: layer(x, position_embeddings=(cos, sin), position_ids=pos)[0], backend=backend, fullgraph=True)
y = f(x); y.sum().backward()
for n in saved: print(*n)
print("total", sum(n[3] for n in saved))
