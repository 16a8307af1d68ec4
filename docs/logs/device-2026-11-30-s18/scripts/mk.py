# Hand-edit variants of the generated attention kernels (session 18 probes).
import re, sys
POLY = r'''
// 2^x on the FMA pipe (FlashAttention-4's trick): x = n + f, n = rint(x), f in [-1/2, 1/2],
// 2^f by a degree-3 minimax polynomial (relative error 7.5e-5), n added to the exponent bits.
__device__ __forceinline__ float hf_exp2_poly(float x) {
  float j = x + 12582912.0f;
  float n = j - 12582912.0f;
  float f = x - n;
  float p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.242611155f), f, 0.693260968f), f, 0.999928057f);
  float r = __int_as_float(__float_as_int(p) + (__float_as_int(j) << 23));
  return x < -125.0f ? 0.0f : r;
}
'''
def poly(src, frac, var):
    src = src.replace('extern "C" __global__', POLY + 'extern "C" __global__', 1)
    cond = {2: f'{var} % 2 == 1', 4: f'{var} % 4 == 3', 8: f'{var} % 8 == 7'}[frac]
    pat = f'e[{var}] = hf_exp2_ftz(e_sub[0]);'
    assert pat in src, pat
    return src.replace(pat, f'e[{var}] = ({cond}) ? hf_exp2_poly(e_sub[0]) : hf_exp2_ftz(e_sub[0]);')
def tree(src):
    # four independent chains per row half for the row max and the row sum
    n = 0
    def mx(m):
        nonlocal n; n += 1
        v, arg = m.group(1), m.group(2)
        return (f'{{ float hf_t[8];\n#pragma unroll\nfor (int i = 0; i < 8; ++i) hf_t[i] = __int_as_float(0xff800000);\n'
                f'#pragma unroll\nfor (index_t {v} = 0; {v} < 64; ++{v}) hf_t[{v} / 2 % 2 * 4 + {v} / 4 % 4] = hf_maximum(hf_t[{v} / 2 % 2 * 4 + {v} / 4 % 4], {arg});\n'
                f'm_acc_part[0] = hf_maximum(m_acc_part[0], hf_maximum(hf_maximum(hf_t[0], hf_t[1]), hf_maximum(hf_t[2], hf_t[3])));\n'
                f'm_acc_part[1] = hf_maximum(m_acc_part[1], hf_maximum(hf_maximum(hf_t[4], hf_t[5]), hf_maximum(hf_t[6], hf_t[7]))); }}\n')
    src = re.sub(r'#pragma unroll\s*\n\s*for \(index_t (r\d) = 0; \1 < 64; \+\+\1\) \{\s*\n\s*m_acc_part\[\1 / 2 % 2\] = hf_maximum\(m_acc_part\[\1 / 2 % 2\], (.*?)\);\s*\n\s*\}', mx, src)
    def sm(m):
        nonlocal n; n += 1
        v = m.group(1)
        return (f'{{ float hf_t[8];\n#pragma unroll\nfor (int i = 0; i < 8; ++i) hf_t[i] = 0.0f;\n'
                f'#pragma unroll\nfor (index_t {v} = 0; {v} < 64; ++{v}) hf_t[{v} / 2 % 2 * 4 + {v} / 4 % 4] += e[{v}];\n'
                f'l_acc_part[0] += (hf_t[0] + hf_t[1]) + (hf_t[2] + hf_t[3]);\n'
                f'l_acc_part[1] += (hf_t[4] + hf_t[5]) + (hf_t[6] + hf_t[7]); }}\n')
    src = re.sub(r'#pragma unroll\s*\n\s*for \(index_t (r\d) = 0; \1 < 64; \+\+\1\) \{\s*\n\s*l_acc_part\[\1 / 2 % 2\] = l_acc_part\[\1 / 2 % 2\] \+ e\[\1\];\s*\n\s*\}', sm, src)
    assert n >= 4, n
    return src
def fold(src):
    # softcap with the hardware tanh: scale / cap as one factor, cap * log2(e) on the tanh,
    # the statistics in log2 units (the exponent an FADD).
    src = src.replace('cap_recip[0] = 1.0f / (cap);', 'cap_recip[0] = 1.0f / (cap);\n    const float hf_c1 = scale * cap_recip[0];\n    const float hf_ka = cap * 1.442695f;', 1)
    for a, b in [('s_sum_acc[r] = s_sum_acc[r] * scale;', 's_sum_acc[r] = s_sum_acc[r] * hf_c1;'),
                 ('sc_div[0] = s_sum_acc[r2] * cap_recip[0];', 'sc_div[0] = s_sum_acc[r2];'),
                 ('sc[r2] = cap * sc_tanh_approx[0];', 'sc[r2] = hf_ka * sc_tanh_approx[0];'),
                 ('m_neg_log2[h4] = m[h4] * -1.442695f;', 'm_neg_log2[h4] = -m[h4];'),
                 ('m_scale[h4] = hf_exp2_ftz(fmaf(m_prev[h4], 1.442695f, m_neg_log2[h4]));', 'm_scale[h4] = hf_exp2_ftz(m_prev[h4] + m_neg_log2[h4]);'),
                 ('e_sub[0] = fmaf(sc[r5], 1.442695f, e_broadcast[0]);', 'e_sub[0] = sc[r5] + e_broadcast[0];')]:
        assert src.count(a) == 2, a
        src = src.replace(a, b)
    return src
att = open('/tmp/att.cu').read(); sch = open('/tmp/sch.cu').read()
out = {
 'att_tree': tree(att), 'att_poly8': poly(att, 8, 'r4'), 'att_poly4': poly(att, 4, 'r4'),
 'att_tree_poly4': poly(tree(att), 4, 'r4'),
 'sch_fold': fold(sch), 'sch_fold_poly4': poly(fold(sch), 4, 'r5'), 'sch_fold_poly2': poly(fold(sch), 2, 'r5'),
 'sch_fold_tree_poly2': poly(tree(fold(sch)), 2, 'r5'),
}
for k, v in out.items():
    open(f'/work/main/target/devA/{k}.cu', 'w').write(v)

def lazy(src, hv, ov):
    # FlashAttention-4's conditional rescaling: a row's maximum moves only when it grows by more
    # than 8 (log2 units); O is rescaled only where some row of the warp moved.
    a = ('            m_acc[0] = hf_maximum(m_acc[0], m_acc_part[0]);\n'
         '            m_acc[1] = hf_maximum(m_acc[1], m_acc_part[1]);\n')
    b = ('            bool hf_grow[2];\n'
         '            #pragma unroll\n'
         '            for (int h = 0; h < 2; ++h) {\n'
         '              float mn = hf_maximum(m_acc[h], m_acc_part[h]);\n'
         '              hf_grow[h] = !((mn - m_acc[h]) * 1.442695f <= 8.0f);\n'
         '              m_acc[h] = hf_grow[h] ? mn : m_acc[h];\n'
         '            }\n'
         '            const bool hf_any = __any_sync(0xffffffffu, hf_grow[0] || hf_grow[1]);\n')
    i = src.index(a, src.index('_pv = 0;'))
    src = src[:i] + b + src[i + len(a):]
    ms = f'              m_scale[{hv}] = hf_exp2_ftz('
    j = src.index(ms, i)
    k = src.index(';\n', j)
    src = src[:j] + f'              m_scale[{hv}] = !hf_grow[{hv}] ? 1.0f : hf_exp2_ftz(' + src[j + len(ms):k] + ';\n' + src[k + 2:]
    lp = '            #pragma unroll\n            for (index_t %s = 0; %s < 64; ++%s) {\n              o_acc[%s] = o_acc[%s] * m_scale[%s / 2 %% 2];\n            }\n' % ((ov,) * 6)
    j = src.index(lp, i)
    src = src[:j] + '            if (hf_any) {\n' + lp + '            }\n' + src[j + len(lp):]
    return src
more = {
 'att_lazy': lazy(att, 'h4', 'r3'),
 'sch_fold_lazy': lazy(fold(sch), 'h4', 'r4'),
 'sch_fold_poly4_lazy': poly(lazy(fold(sch), 'h4', 'r4'), 4, 'r5'),
}
for k, v in more.items():
    open(f'/work/main/target/devA/{k}.cu', 'w').write(v)
