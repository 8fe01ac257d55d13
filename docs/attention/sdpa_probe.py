# Probe: builds the cuDNN 9 composite SDPA operation graph through the backend C API with
# hand-declared enum values (no cuDNN header), to check the values and attribute types.
import ctypes as C, sys
lib = C.CDLL(sys.argv[1] if len(sys.argv) > 1 else "libcudnn.so.9")
lib.cudnnGetVersion.restype = C.c_size_t
lib.cudnnGetErrorString.restype = C.c_char_p
print("cudnnGetVersion", lib.cudnnGetVersion())
# enums (cudnn_graph.h 9.x)
T_HANDLE, T_DATA_TYPE, T_BOOLEAN, T_INT64, T_FLOAT, T_DOUBLE, T_VOID_PTR = 0, 1, 2, 3, 4, 5, 6
T_HEUR_MODE, T_POINTWISE_MODE, T_BACKEND_DESCRIPTOR, T_REDUCTION_OPERATOR_TYPE, T_INT32 = 8, 14, 15, 18, 23
D_POINTWISE, D_ENGINECFG, D_ENGINEHEUR, D_PLAN, D_OP_POINTWISE, D_OPGRAPH, D_VARPACK, D_TENSOR = 0, 3, 4, 5, 13, 15, 16, 17
D_MATMUL, D_OP_MATMUL, D_REDUCTION, D_OP_REDUCTION = 18, 19, 21, 22
DT_FLOAT, DT_HALF, DT_INT32, DT_BF16, DT_BOOL = 0, 2, 4, 9, 11
PW_ADD, PW_MUL, PW_DIV, PW_SUB, PW_EXP, PW_CMP_GE, PW_GEN_INDEX, PW_BINARY_SELECT = 0, 1, 6, 9, 13, 303, 501, 601
RED_ADD, RED_MAX = 0, 3
A_PW_MODE, A_PW_MATH_PREC, A_PW_AXIS = 0, 1, 9
A_OP_PW_DESC, A_OP_PW_X, A_OP_PW_B, A_OP_PW_Y, A_OP_PW_T = 750, 751, 752, 753, 758
A_OPGRAPH_OPS = 801
A_T_ALIGN, A_T_DTYPE, A_T_DIMS, A_T_STRIDES, A_T_UID, A_T_VIRTUAL, A_T_BYVALUE = 900, 901, 902, 903, 906, 907, 908
A_MATMUL_COMP = 1500
A_OP_MM_A, A_OP_MM_B, A_OP_MM_C, A_OP_MM_DESC = 1520, 1521, 1522, 1523
A_RED_OP, A_RED_COMP = 1600, 1601
A_OP_RED_X, A_OP_RED_Y, A_OP_RED_DESC = 1610, 1611, 1612
A_HEUR_MODE, A_HEUR_GRAPH, A_HEUR_RESULTS = 200, 201, 202
def ck(s, what):
    if s != 0:
        buf = C.create_string_buffer(1024); lib.cudnnGetLastErrorString(buf, C.c_size_t(1024))
        raise SystemExit(f"FAIL {what}: {s} {lib.cudnnGetErrorString(s).decode()} | {buf.value.decode()[:300]}")
def create(t):
    d = C.c_void_p(); ck(lib.cudnnBackendCreateDescriptor(t, C.byref(d)), f"create {t}"); return d
def setattr_(d, name, typ, vals, ctype):
    arr = (ctype * len(vals))(*vals)
    ck(lib.cudnnBackendSetAttribute(d, name, typ, C.c_int64(len(vals)), arr), f"set {name}")
def fin(d, what): ck(lib.cudnnBackendFinalize(d), f"finalize {what}")
def tensor(uid, dims, strides, dtype, virtual=False, byvalue=False):
    t = create(D_TENSOR)
    setattr_(t, A_T_DTYPE, T_DATA_TYPE, [dtype], C.c_int32)
    setattr_(t, A_T_DIMS, T_INT64, dims, C.c_int64)
    setattr_(t, A_T_STRIDES, T_INT64, strides, C.c_int64)
    setattr_(t, A_T_UID, T_INT64, [uid], C.c_int64)
    setattr_(t, A_T_ALIGN, T_INT64, [16], C.c_int64)
    if virtual: setattr_(t, A_T_VIRTUAL, T_BOOLEAN, [True], C.c_bool)
    if byvalue: setattr_(t, A_T_BYVALUE, T_BOOLEAN, [True], C.c_bool)
    fin(t, f"tensor {uid}"); return t
def pw(mode, x, y, b=None, t=None, prec=DT_FLOAT, axis=None):
    p = create(D_POINTWISE)
    setattr_(p, A_PW_MODE, T_POINTWISE_MODE, [mode], C.c_int32)
    setattr_(p, A_PW_MATH_PREC, T_DATA_TYPE, [prec], C.c_int32)
    if axis is not None: setattr_(p, A_PW_AXIS, T_INT64, [axis], C.c_int64)
    fin(p, f"pw desc {mode}")
    op = create(D_OP_POINTWISE)
    setattr_(op, A_OP_PW_DESC, T_BACKEND_DESCRIPTOR, [p], C.c_void_p)
    setattr_(op, A_OP_PW_X, T_BACKEND_DESCRIPTOR, [x], C.c_void_p)
    if b is not None: setattr_(op, A_OP_PW_B, T_BACKEND_DESCRIPTOR, [b], C.c_void_p)
    if t is not None: setattr_(op, A_OP_PW_T, T_BACKEND_DESCRIPTOR, [t], C.c_void_p)
    setattr_(op, A_OP_PW_Y, T_BACKEND_DESCRIPTOR, [y], C.c_void_p)
    fin(op, f"pw op {mode}"); return op
def mm(a, b, c):
    m = create(D_MATMUL); setattr_(m, A_MATMUL_COMP, T_DATA_TYPE, [DT_FLOAT], C.c_int32); fin(m, "matmul desc")
    op = create(D_OP_MATMUL)
    for n, v in ((A_OP_MM_A, a), (A_OP_MM_B, b), (A_OP_MM_C, c), (A_OP_MM_DESC, m)):
        setattr_(op, n, T_BACKEND_DESCRIPTOR, [v], C.c_void_p)
    fin(op, "matmul op"); return op
def red(kind, x, y):
    r = create(D_REDUCTION)
    setattr_(r, A_RED_OP, T_REDUCTION_OPERATOR_TYPE, [kind], C.c_int32)
    setattr_(r, A_RED_COMP, T_DATA_TYPE, [DT_FLOAT], C.c_int32); fin(r, "reduction desc")
    op = create(D_OP_REDUCTION)
    for n, v in ((A_OP_RED_X, x), (A_OP_RED_Y, y), (A_OP_RED_DESC, r)):
        setattr_(op, n, T_BACKEND_DESCRIPTOR, [v], C.c_void_p)
    fin(op, "reduction op"); return op
b, h, hk, sq, skv, d, causal, bias = 2, 8, 2, 1000, 1000, 128, True, True
io = DT_BF16
Q = tensor(1, [b, h, sq, d], [h*sq*d, sq*d, d, 1], io)
KT = tensor(2, [b, hk, d, skv], [hk*skv*d, skv*d, 1, d], io)       # K stored [b,hk,skv,d], viewed as K^T
V = tensor(3, [b, hk, skv, d], [hk*skv*d, skv*d, d, 1], io)
O = tensor(4, [b, h, sq, d], [h*sq*d, sq*d, d, 1], io)
SCALE = tensor(5, [1, 1, 1, 1], [1, 1, 1, 1], DT_FLOAT, byvalue=True)
NEGINF = tensor(6, [1, 1, 1, 1], [1, 1, 1, 1], DT_FLOAT, byvalue=True)
BIAS = tensor(7, [1, 1, sq, skv], [sq*skv, sq*skv, skv, 1], io)
full, fstr = [b, h, sq, skv], [h*sq*skv, sq*skv, skv, 1]
row, rstr = [b, h, sq, 1], [h*sq, sq, 1, 1]
uid = [100]
def v(dims=full, strides=fstr, dt=DT_FLOAT):
    uid[0] += 1; return tensor(uid[0], dims, strides, dt, virtual=True)
ops = []
S = v(); ops.append(mm(Q, KT, S))
S2 = v(); ops.append(pw(PW_MUL, S, S2, b=SCALE)); S = S2
if bias: S2 = v(); ops.append(pw(PW_ADD, S, S2, b=BIAS)); S = S2
if causal:
    r = v(dt=DT_INT32); ops.append(pw(PW_GEN_INDEX, S, r, axis=2))
    c = v(dt=DT_INT32); ops.append(pw(PW_GEN_INDEX, S, c, axis=3))
    m = v(dt=DT_BOOL); ops.append(pw(PW_CMP_GE, r, m, b=c, prec=DT_BOOL))
    S2 = v(); ops.append(pw(PW_BINARY_SELECT, S, S2, b=NEGINF, t=m)); S = S2
M = v(row, rstr); ops.append(red(RED_MAX, S, M))
Z = v(); ops.append(pw(PW_SUB, S, Z, b=M))
E = v(); ops.append(pw(PW_EXP, Z, E))
L = v(row, rstr); ops.append(red(RED_ADD, E, L))
P = v(dt=io); ops.append(pw(PW_DIV, E, P, b=L))
ops.append(mm(P, V, O))
g = create(D_OPGRAPH)
setattr_(g, A_OPGRAPH_OPS, T_BACKEND_DESCRIPTOR, ops, C.c_void_p)
fin(g, "operation graph")
print("operation graph finalized with", len(ops), "ops")
hdl = C.c_void_p(); s = lib.cudnnCreate(C.byref(hdl)); print("cudnnCreate", s)
heur = create(D_ENGINEHEUR)
setattr_(heur, A_HEUR_GRAPH, T_BACKEND_DESCRIPTOR, [g], C.c_void_p)
setattr_(heur, A_HEUR_MODE, T_HEUR_MODE, [3], C.c_int32)  # CUDNN_HEUR_MODE_A
fin(heur, "heuristics")
n = C.c_int64(); ck(lib.cudnnBackendGetAttribute(heur, A_HEUR_RESULTS, T_BACKEND_DESCRIPTOR, C.c_int64(0), C.byref(n), None), "heur count")
print("engine configs:", n.value)
