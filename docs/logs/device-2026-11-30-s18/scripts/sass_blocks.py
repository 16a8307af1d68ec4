import re,collections,sys
txt=open(sys.argv[1]).read().splitlines()
cur=None; blocks=collections.OrderedDict()
for l in txt:
    m=re.match(r'^(\.L_x_\d+):',l)
    if m: cur=m.group(1); blocks[cur]=[]; continue
    m=re.match(r'\s*/\*([0-9a-f]{4})\*/\s*(.*?);',l)
    if m and cur: blocks[cur].append((int(m.group(1),16),m.group(2)))
for k,v in blocks.items():
    if len(v)<50: continue
    c=collections.Counter(re.sub(r'^@!?U?P\w+\s+','',i).split()[0].split('.')[0] for _,i in v)
    print(k,hex(v[0][0]),len(v),dict(c.most_common(10)))
