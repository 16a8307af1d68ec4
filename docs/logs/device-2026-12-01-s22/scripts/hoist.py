"""Hand edit of a document-mask attention kernel: the mbarrier init, the tensor-map prefetch and
the Q tile's TMA issue moved above the list of visited key tiles, so Q's load overlaps it."""
import re, sys
src = open(sys.argv[1]).read()
lines = src.split('\n')
# The list's line.
li = next(i for i, l in enumerate(lines) if 'hf_visit_document_tiles<' in l and 'hf_visited_n =' in l)
# The init block right after the list (and the assume).
ii = next(i for i in range(li, len(lines)) if lines[i].strip() == 'if (hf_warp == 0 && hf_elect_one()) {')
ie = next(i for i in range(ii, len(lines)) if lines[i] == '  }')
assert lines[ie + 1].strip() == '__syncthreads();', lines[ie + 1]
init = lines[ii:ie]  # without the closing brace
# The consumer's Q issue.
qi = next(i for i in range(ie, len(lines)) if lines[i].strip() == 'if (hf_warp == 0 && hf_elect_one()) {' and 'qs_full' in lines[i + 1])
qe = next(i for i in range(qi, len(lines)) if lines[i].strip() == '}')
q_body = [l.replace('&qs[', '&hf_qs_hoisted[') for l in lines[qi + 1:qe]]
qdecl = next(l for l in lines[ie:qi] if 'hf_bf16* qs = ' in l)
decl = qdecl.strip().replace('hf_bf16* qs = ', 'hf_bf16* hf_qs_hoisted = ')
hoisted = init + ['    ' + decl] + ['  ' + l.strip() and '    ' + l.strip() for l in q_body] + ['  }']
out = lines[:li] + hoisted + lines[li:ii] + ['  __syncthreads();'][:0] + lines[ie + 1:qi] + lines[qe + 1:]
open(sys.argv[2], 'w').write('\n'.join(out))
