#!/usr/bin/env python3
"""Hand edit of step 18's generated CUDA (examples/matmul/step18_fp8_block.hf, `hopfuse compile
--cuda --size ...`): two block accumulators, so block k's promotion overlaps block k+1's wgmmas.

Usage: fp8_dual.py IN.cu OUT.cu [--unroll U] [--drain]    (default: --unroll 2, the pipeline)

The generated consumer k loop is, per 128-wide K block k:
    load scales -> started = 0 -> wait full[k] -> wgmma.fence -> 4 wgmmas into s_acc_block
    -> commit -> wait_group 0 -> arrive empty[k] -> s_acc += s_acc_block * (sa * sb)
The edit gives s_acc_block (and the scale registers and the scale-d flag) two halves and takes U
blocks (U even) per iteration of an outer loop, the inner one unrolled (so every half index is a
constant):
    for k_oo: for k_oi in 0..U (unrolled), k_o = k_oo * U + k_oi:
        if (k_o < KB) { load scales into half k_oi % 2; started[k_oi % 2] = 0; wait full[k_o];
                        wgmma.fence; 4 wgmmas into half k_oi % 2 (scale-d 0 on the first) }
        commit                                   (an empty group past the last block)
        wait_group 1; if (0 <= k_o - 1 < KB) { arrive empty[k_o - 1]; promote half (k_o - 1) % 2 }
    wait_group 0; if (the last group held a block) { arrive empty; promote it }   (before the epilogue)
This is the pure software pipeline: one group in flight across the loop's back edge, every
promotion but each tile's last overlaps the next block's wgmmas. docs/fp8.md says ptxas 13.0
serialises every wgmma (C7514) for such a loop; NVRTC 13.0 here (.tools/cuda13) did not: no C7514
or C7517, QGMMA gsb0 only on each block's last, WARPGROUP.DEPBAR.LE gsb0 0x1 per block, 0 spills.
--drain: the compiler's step18_fp8_block_overlap form instead: no wait_group 1 at k_oi = 0, and each
iteration ends with wait_group 0 and its last block's promotion ((U - 1) / U of the promotions
overlap; use --unroll 4).

Every rewrite asserts that its anchor occurs exactly as often as expected, so a changed generator
fails here instead of producing a wrong kernel.
"""
import re
import sys


def once(src, old, new, count=1):
    n = src.count(old)
    assert n == count, f"anchor found {n} times (expected {count}): {old[:120]!r}"
    return src.replace(old, new)


def edit(src, unroll=2, carry=True):
    assert unroll >= 2 and unroll % 2 == 0, "unroll must be even (the half of block k is k % 2)"
    U = unroll
    # --- the declarations: two halves of the block accumulator, its scales and its scale-d flag
    m = re.findall(r"alignas\(16\) float s_acc_block\[(\d+)\];", src)
    assert len(m) == 1, m
    R = int(m[0])  # registers of one block accumulator (64 for m64n128)
    src = once(src, f"alignas(16) float s_acc_block[{R}];", f"alignas(16) float s_acc_block[{2 * R}];")
    src = once(src, "alignas(16) int s_acc_block_started[1];", "alignas(16) int s_acc_block_started[2];")
    src = once(src, f"alignas(16) float s_acc_block_sa[{R}];", f"alignas(16) float s_acc_block_sa[{2 * R}];")
    src = once(src, f"alignas(16) float s_acc_block_sb[{R}];", f"alignas(16) float s_acc_block_sb[{2 * R}];")

    # --- the k loop, cut into its pieces
    head = re.findall(r"\n( *)for \(index_t k_o = 0; k_o < ([^;]+); \+\+k_o\) \{\n", src)
    assert len(head) == 1, head
    ind, KB = head[0]
    loop_start = src.index(f"{ind}for (index_t k_o = 0; k_o < {KB}; ++k_o) {{\n")
    tail_re = re.compile(
        r"( *)hf_wgmma_commit\(\);\n"
        r" *hf_wgmma_wait<0>\(\);\n"
        r"( *hf_mbarrier_arrive_per_warp\(&a_s_b_s_empty\[[^\n]*\]\);\n)"
        r"( *\{  // m_io = threadIdx\.y\n"
        r" *#pragma unroll\n"
        r" *for \(index_t r3 = 0; r3 < " + str(R) + r"; \+\+r3\) \{\n"
        r" *s_acc\[r3\] = s_acc\[r3\] \+ \(s_acc_block\[r3\] \* \(s_acc_block_sa\[r3\] \* s_acc_block_sb\[r3\]\)\);\n"
        r" *\}\n"
        r" *\}\n)"
        + re.escape(ind) + r"\}\n")
    tails = list(tail_re.finditer(src, loop_start))
    assert len(tails) == 1, f"{len(tails)} k-loop tails"
    t = tails[0]
    body = src[loop_start + len(f"{ind}for (index_t k_o = 0; k_o < {KB}; ++k_o) {{\n"):t.start()]
    arrive, promote = t.group(2), t.group(3)
    # nothing else may read or wait on the block accumulator in the issue part
    assert "hf_wgmma_wait" not in body and "hf_wgmma_commit" not in body
    assert body.count("hf_mbarrier_wait(&a_s_b_s_full[") == 1
    assert body.count("hf_wgmma_fence();") == 1
    # the full-barrier wait comes before the fence and the wgmmas
    assert body.index("hf_mbarrier_wait(&a_s_b_s_full[") < body.index("hf_wgmma_fence();") < body.index("hf_wgmma_m64n")

    # --- the issue part: half k_oi % 2
    body = once(body, "s_acc_block_sa[r2] =", f"s_acc_block_sa[r2 + k_oi % 2 * {R}] =")
    body = once(body, "s_acc_block_sb[r2] =", f"s_acc_block_sb[r2 + k_oi % 2 * {R}] =")
    body = once(body, "s_acc_block_started[0]", "s_acc_block_started[k_oi % 2]", count=3)
    wg = re.findall(r"hf_wgmma_m64n\d+k32_e4m3_e4m3\(&s_acc_block\[0\],", body)
    assert len(wg) == 1, wg
    body = once(body, wg[0], wg[0].replace("&s_acc_block[0],", f"&s_acc_block[k_oi % 2 * {R}],"))
    assert "s_acc_block[" not in body.replace(f"&s_acc_block[k_oi % 2 * {R}]", ""), "another read of s_acc_block"
    body = "".join("    " + l if l.strip() else l for l in body.splitlines(True))  # two levels deeper

    # --- the promotion of the block whose half is `half` (a C expression), in a scope where k_o is that block
    def promotion(k_expr, half, pad):
        p = promote
        p = once(p, "s_acc_block[r3]", f"s_acc_block[r3 + {half} * {R}]")
        p = once(p, "s_acc_block_sa[r3]", f"s_acc_block_sa[r3 + {half} * {R}]")
        p = once(p, "s_acc_block_sb[r3]", f"s_acc_block_sb[r3 + {half} * {R}]")
        text = arrive + p
        strip = min(len(l) - len(l.lstrip(" ")) for l in text.splitlines() if l.strip())
        text = "".join(pad + "    " + l[strip:] for l in text.splitlines(True))
        return (f"{pad}{{  // block {k_expr}: its group has completed; release its stage, promote its half\n"
                f"{pad}  const index_t hf_kp = {k_expr};\n"
                f"{pad}  if (0 <= hf_kp && hf_kp < {KB}) {{\n"
                f"{pad}    const index_t k_o = hf_kp;\n"
                + text
                + f"{pad}  }}\n{pad}}}\n")

    i0, i1, i2 = ind, ind + "  ", ind + "    "
    n_iter = f"(({KB}) + {U - 1}) / {U}"
    out = []
    out.append(f"{i0}// hand edit (fp8_dual.py, unroll={U}, carry={carry}): two block accumulators; block k's\n")
    out.append(f"{i0}// promotion runs while block k + 1's wgmmas do (wgmma.wait_group 1)\n")
    out.append(f"{i0}for (index_t k_oo = 0; k_oo < {n_iter}; ++k_oo) {{\n")
    out.append(f"{i1}#pragma unroll\n")
    out.append(f"{i1}for (index_t k_oi = 0; k_oi < {U}; ++k_oi) {{\n")
    out.append(f"{i2}const index_t k_o = k_oo * {U} + k_oi;\n")
    out.append(f"{i2}if (k_o < {KB}) {{\n")
    out.append(body)
    out.append(f"{i2}}}\n")
    out.append(f"{i2}hf_wgmma_commit();\n")
    if carry:
        out.append(f"{i2}hf_wgmma_wait<1>();\n")
        out.append(promotion("k_o - 1", "((k_oi + 1) % 2)", i2))
    else:
        out.append(f"{i2}if (0 < k_oi) {{\n")
        out.append(f"{i2}  hf_wgmma_wait<1>();\n")
        out.append(promotion("k_o - 1", "((k_oi + 1) % 2)", i2 + "  "))
        out.append(f"{i2}}}\n")
    out.append(f"{i1}}}\n")
    if not carry:
        out.append(f"{i1}hf_wgmma_wait<0>();\n")
        out.append(promotion(f"k_oo * {U} + {U - 1}", f"{(U - 1) % 2}", i1))
    out.append(f"{i0}}}\n")
    if carry:
        out.append(f"{i0}hf_wgmma_wait<0>();\n")
        out.append(promotion(f"{n_iter} * {U} - 1", f"{(U - 1) % 2}", i0))
    src = src[:loop_start] + "".join(out) + src[t.end():]
    return src


def main():
    args = sys.argv[1:]
    unroll, carry = 2, True
    if "--carry" in args:
        args.remove("--carry")
    if "--drain" in args:
        args.remove("--drain")
        carry = False
    if "--unroll" in args:
        i = args.index("--unroll")
        unroll = int(args[i + 1])
        del args[i:i + 2]
    assert len(args) == 2, __doc__
    src = open(args[0]).read()
    open(args[1], "w").write(edit(src, unroll, carry))


if __name__ == "__main__":
    main()
