exec(open('sdpa_probe.py').read().split("full, fstr")[0])
K = tensor(12, [b, hk, skv, d], [hk*skv*d, skv*d, d, 1], io)
op = create(41)
for n, t_ in ((2800, Q), (2801, K), (2802, V), (2803, O), (2805, SCALE)):
    setattr_(op, n, T_BACKEND_DESCRIPTOR, [t_], C.c_void_p)
fin(op, "SDPA_FWD op")
g = create(D_OPGRAPH); setattr_(g, A_OPGRAPH_OPS, T_BACKEND_DESCRIPTOR, [op], C.c_void_p); fin(g, "graph")
print("unified SDPA_FWD graph finalized")
