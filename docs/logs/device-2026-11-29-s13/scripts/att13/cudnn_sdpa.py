# cuDNN SDPA at one shape for ncu: python3 cudnn_sdpa.py B S T [causal]
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
B, S, T = (int(x) for x in sys.argv[1:4]); causal = len(sys.argv) > 4
q = torch.randn(B, 1, S, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, 1, T, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, 1, T, 128, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(4):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
torch.cuda.synchronize()
