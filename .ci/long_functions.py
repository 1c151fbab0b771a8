#!/usr/bin/env python3
"""List Rust functions longer than LIMIT lines, longest first.

Usage: .ci/long_functions.py LIMIT DIR...   (e.g. 80 src vendor/tiny_http/src)

A function's length runs from its `fn` line to its closing brace, found by
brace depth with strings, chars and comments left out (a rough scan, not a
parser). Not run by .ci/run: a helper for keeping functions short.
"""
import re, sys, os
LIMIT = int(sys.argv[1]); roots = sys.argv[2:]
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+(\w+)')
def strip(line, state):
    # remove strings, chars, comments (rough); state: in block comment / raw string
    out=[];i=0;n=len(line)
    while i<n:
        if state['block']:
            j=line.find('*/',i)
            if j<0: return ''.join(out)
            state['block']=False; i=j+2; continue
        if state['str']:
            if line[i]=='\\': i+=2; continue
            if line[i]=='"': state['str']=False
            i+=1; continue
        c=line[i]
        if line.startswith('//',i): break
        if line.startswith('/*',i): state['block']=True; i+=2; continue
        m=re.match(r'r(#*)"',line[i:])
        if m and (i==0 or not (line[i-1].isalnum() or line[i-1]=='_')):
            end='"'+m.group(1); j=line.find(end,i+len(m.group(0)))
            if j<0: state['raw']=end; return ''.join(out)
            i=j+len(end); continue
        if c=='"': state['str']=True; i+=1; continue
        if c=="'":
            m=re.match(r"'(\\.|[^\\'])'",line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'",line[i:])
            if m: i+=len(m.group(0)); continue
        out.append(c); i+=1
    return ''.join(out)
res=[]
for root in roots:
    for dp,_,fs in os.walk(root):
        for f in fs:
            if not f.endswith('.rs'): continue
            p=os.path.join(dp,f); lines=open(p,encoding='utf-8',errors='replace').read().split('\n')
            state={'block':False,'str':False,'raw':None}
            clean=[]
            for l in lines:
                if state['raw']:
                    j=l.find(state['raw'])
                    if j<0: clean.append(''); continue
                    l=l[j+len(state['raw']):]; state['raw']=None
                clean.append(strip(l,state))
            for i,l in enumerate(clean):
                m=FN.match(l)
                if not m: continue
                depth=0; started=False
                for j in range(i,len(clean)):
                    for ch in clean[j]:
                        if ch=='{': depth+=1; started=True
                        elif ch=='}': depth-=1
                        elif ch==';' and not started and depth==0: break
                    else:
                        if started and depth==0:
                            ln=j-i+1
                            if ln>LIMIT: res.append((ln,p,i+1,m.group(7)))
                            break
                        continue
                    break
for r in sorted(res,reverse=True): print(f"{r[0]:4} {r[1]}:{r[2]} {r[3]}")
