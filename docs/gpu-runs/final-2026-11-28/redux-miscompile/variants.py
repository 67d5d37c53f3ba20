import re, sys
d = sys.argv[1]
for case in ['orig', 'shrunk']:
    src = open(f'{d}/{case}.ptx').read()
    lines = src.split('\n')
    # (a) drop the skip branch right after each subgroup-op vote.any
    out, n = [], 0
    for i, l in enumerate(lines):
        if re.match(r'\s*@!%p\d+ bra \$L__\d+;', l) and 'vote.sync.any.pred' in lines[i-1]:
            m = re.search(r'vote\.sync\.any\.pred (%p\d+)', lines[i-1]).group(1)
            if m in l:
                # only when the next lines hold a redux/shfl/vote (a subgroup evaluation)
                nxt = '\n'.join(lines[i+1:i+40])
                n += 1
                continue
        out.append(l)
    open(f'{d}/{case}.nobranch.ptx', 'w').write('\n'.join(out))
    # (b) warp sync before each redux
    out2 = []
    for l in lines:
        m = re.match(r'(\s*)redux\.sync\.\w+\.\w+ %r\d+, %r\d+, (%r\d+);', l)
        if m:
            out2.append(f'{m.group(1)}bar.warp.sync {m.group(2)};')
        out2.append(l)
    open(f'{d}/{case}.warpsync.ptx', 'w').write('\n'.join(out2))
    print(case, 'branches dropped', n)
