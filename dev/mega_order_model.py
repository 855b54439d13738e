#!/usr/bin/env python3
# A model of mega rows in token order (dev/drafts/mega_token_order.patch, src/kernels/mega_order.cuh once
# merged): count items, the scan, the order (windows of m tile ranks, combine groups after their
# window) and the decode of an item, on random shapes and routings. Asserts that every expert's rows
# are placed once, that the decode maps the items one to one onto GEMM2 items and combine groups,
# and that every group is numbered after each GEMM2 item it waits for. Runs in ~5 s.
import random
def ceil(a,b): return -(-a//b)
def sim(n_tok,K,E,BM,B,n2,cpi,seed,route):
    rnd=random.Random(seed)
    ids=[]
    for t in range(n_tok):
        if route=='uniform': ids.append(rnd.sample(range(E),K) if K<=E else [rnd.randrange(E) for _ in range(K)])
        elif route=='one': ids.append([0]*K)
        else: ids.append([rnd.choice([0,1,E-1,-1]) for _ in range(K)])
    slots=[(t,k,ids[t][k]) for t in range(n_tok) for k in range(K)]
    n_count=ceil(len(slots),B)
    hist=[[0]*n_count for _ in range(E)]
    pos={}
    for i in range(n_count):
        loc=list(range(i*B,min(len(slots),(i+1)*B))); rnd.shuffle(loc)
        for s in loc:
            e=slots[s][2]
            if e<0: continue
            pos[s]=hist[e][i]; hist[e][i]+=1
    cnt=[sum(h) for h in hist]
    off=[0]; tile_off=[0]
    for e in range(E): off.append(off[-1]+cnt[e]); tile_off.append(tile_off[-1]+ceil(cnt[e],BM))
    tiles=tile_off[E]
    P=[[0]*n_count for _ in range(E)]; steps=[0]*n_count
    for e in range(E):
        p=0
        for i in range(n_count):
            P[e][i]=p; inc=p+hist[e][i]
            if hist[e][i] and ceil(inc,BM)>ceil(p,BM): steps[i]=max(steps[i],ceil(inc,BM))
            p=inc
    row={}
    for s,(t,k,e) in enumerate(slots):
        if e>=0: row[s]=off[e]+P[e][s//B]+pos[s]
    # rows of each expert distinct and in range
    for e in range(E):
        rs=sorted(row[s] for s in row if slots[s][2]==e); assert rs==list(range(off[e],off[e+1]))
    mmin=min(tile_off[e+1]-tile_off[e] for e in range(E))
    L=max(3,ceil(mmin,3)); J=mmin//L if mmin//L>=2 else 0  # J: windows of L ranks (none unless 2 fit)
    m=0
    for i in range(n_count): m=max(m,steps[i]); steps[i]=m
    n_combine=ceil(n_tok,cpi)
    lg=[0]*3  # MOE_EP_MEGA_WINDOWS
    for g in range(n_combine):
        last=min(n_tok,(g+1)*cpi)*K-1
        r=max(steps[last//B]-1,0)
        if r//L<J: lg[r//L]+=1
    c=0
    for j in range(J): c+=lg[j]; lg[j]=c
    per_rank=E*L*n2
    def dec(x):
        j=min(x//per_rank,J)
        while j>0 and j*per_rank+lg[j-1]>x: j-=1
        groups=lg[j-1] if j else 0
        x-=j*per_rank+groups
        if j<J:
            if x>=per_rank: return -1-(groups+x-per_rank)
            e=x//(L*n2); return (tile_off[e]+j*L)*n2+(x-e*L*n2)
        JL=J*L
        rest=(tiles-JL*E)*n2
        if x>=rest: return -1-(groups+x-rest)
        q=x//n2; lo,hi=0,E-1
        while lo<hi:
            mid=(lo+hi+1)>>1
            if tile_off[mid]-mid*JL<=q: lo=mid
            else: hi=mid-1
        return (tile_off[lo]+JL+q-(tile_off[lo]-lo*JL))*n2+(x-q*n2)
    total=tiles*n2+n_combine
    seen={}
    for x in range(total):
        r=dec(x); assert r not in seen,(x,r); seen[r]=x
    assert set(seen)==set(range(tiles*n2))|set(-1-g for g in range(n_combine)),"not onto"
    assert dec(total)<0 and -1-dec(total)>=n_combine
    # deps: group g needs g2 tiles of its rows; all column blocks of tile mt
    for g in range(n_combine):
        gx=seen[-1-g]
        for t in range(g*cpi,min(n_tok,(g+1)*cpi)):
            for k in range(K):
                s=t*K+k
                if s not in row: continue
                e=slots[s][2]; mt=tile_off[e]+(row[s]-off[e])//BM
                for col in range(n2): assert seen[mt*n2+col]<gx,("dep",g,mt)
    # how early do groups come: fraction of groups before the last GEMM2 item
    lastg2=max(seen[r] for r in seen if r>=0)
    early=sum(1 for g in range(n_combine) if seen[-1-g]<lastg2)
    return J,L,tiles,n_combine,early
for seed in range(40):
    rnd=random.Random(seed)
    E=rnd.choice([2,3,8,16,32]);K=rnd.randint(1,min(8,E));BM=rnd.choice([16,32,64,128]);B=384
    n_tok=rnd.randint(1,3000);n2=rnd.choice([1,2,16]);cpi=rnd.randint(1,40)
    for route in ['uniform','one','sparse']:
        r=sim(n_tok,K,E,BM,B,n2,cpi,seed,route)
    print(seed,E,K,BM,n_tok,n2,cpi,r)
print("flash-like",sim(8192,6,32,128,384,16,31,1,'uniform'))
print("pro-like",sim(8192,6,48,128,384,28,31,1,'uniform'))
print("flash-2048",sim(2048,6,32,128,384,16,8,1,'uniform'))
for seed in range(200):
    rnd=random.Random(seed)
    E=rnd.choice([2,3,8,16,32]);K=rnd.randint(1,min(8,E));BM=rnd.choice([16,32,64,128])
    n_tok=rnd.randint(1,3000);n2=rnd.choice([1,2,16]);cpi=rnd.randint(1,40)
    sim(n_tok,K,E,BM,384,n2,cpi,seed,'uniform')
print("200 uniform ok")
