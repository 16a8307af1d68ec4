import torch
a = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
a2 = torch.randn(128, 4096, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    c = a @ b.t(); c2 = a2 @ b.t()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
c = a @ b.t()
c2 = a2 @ b.t()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
