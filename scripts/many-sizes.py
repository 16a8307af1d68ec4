#!/usr/bin/env python3
"""Writes a copy of a program with COUNT random `// bench:` size lines, for hang checks:
`hopfuse bench --iters 3 --warmup 1 OUT` then runs it at every size in one warm worker.

    python3 scripts/many-sizes.py examples/ws/mul_two_roles.hf 500 .variants/mul_two_roles_500.hf

Sizes (seed 2026): M uniform in 1..1500, N a multiple of 4 in 4..2800 (TMA rows are multiples of
16 bytes). A matrix product (an input with a K dimension) gets K too: N and K multiples of 8 in
8..3000 (bf16 rows of TMA-loaded and TMA-stored tensors), M in 1..3000. Attention (inputs with
S and T dimensions) gets B in 1..4 and S, T in 1..1100 (any length: a key or query tile may be
partial). The fusion is renamed `<name>_<COUNT>`.
"""
import random
import re
import sys


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    src_path, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    src = open(src_path).read()
    lines = [l for l in src.splitlines() if not l.startswith("// bench:")]
    text = re.sub(r"^fusion (\w+)", rf"fusion \1_{count}", "\n".join(lines) + "\n", flags=re.M)
    rng = random.Random(2026)
    product = re.search(r"^\s*input \w+: \w+\[[^\]]*\bK\b", src, flags=re.M) is not None
    attention = re.search(r"^\s*input \w+: \w+\[[^\]]*\bT\b", src, flags=re.M) is not None
    for _ in range(count):
        if attention:
            b, s_len, t_len = rng.randint(1, 4), rng.randint(1, 1100), rng.randint(1, 1100)
            text += f"// bench: B={b},S={s_len},T={t_len}\n"
        elif product:
            m, n, k = rng.randint(1, 3000), 8 * rng.randint(1, 375), 8 * rng.randint(1, 375)
            text += f"// bench: M={m},N={n},K={k}\n"
        else:
            m, n = rng.randint(1, 1500), 4 * rng.randint(1, 700)
            text += f"// bench: M={m},N={n}\n"
    open(out, "w").write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
