"""gplan's runtime from Python: ctypes over libgplan.so (the API of <gplan/gplan.h>).

    m = gplan.Model("tiny.plan").random_weights(1)
    s = gplan.Session(m, backend="cpu", threads=1)
    ids = s.generate([1, 2, 3], 8)

The library is GPLAN_LIBRARY (a path) when set, else libgplan.so.0 from the system's library path.
Every failure raises gplan.Error with the library's message.
"""
import ctypes
import ctypes.util
import os
import struct
import weakref

__all__ = ["Error", "Model", "Session", "library_path", "DTYPES"]
__version__ = "0.1.0"

_MAX_DIMS = 4  # GP_MAX_DIMS
# gp_dtype's values (gplan_types.h): name, struct format of one element (None: no element size).
DTYPES = ["f32", "f16", "bf16", "i32", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k",
          "q6_k"]
_FORMATS = {"f32": "f", "f16": "e", "i32": "i"}
_NUMPY = {"f32": "float32", "f16": "float16", "i32": "int32"}


class Error(Exception):
    """A failure reported by libgplan; str(e) is its message."""


# ---- the C structs (gplan.h), field by field ----

class _ModelInfo(ctypes.Structure):
    _fields_ = [("graph_name", ctypes.c_char_p),
                ("n_inputs", ctypes.c_int), ("n_outputs", ctypes.c_int),
                ("tokens", ctypes.c_char_p), ("positions", ctypes.c_char_p),
                ("logits", ctypes.c_char_p), ("tokens_dim", ctypes.c_char_p),
                ("max_tokens", ctypes.c_int64), ("vocab", ctypes.c_int64),
                ("context", ctypes.c_int64), ("weights_mapped", ctypes.c_int64),
                ("weights_loaded", ctypes.c_int64), ("region_bytes", ctypes.c_int64 * 5),
                ("rows", ctypes.c_char_p), ("rows_dim", ctypes.c_char_p),
                ("max_rows", ctypes.c_int64),
                # Room for fields a later library appends, so that it never writes past the end.
                ("_spare", ctypes.c_char * 512)]


class _SessionOpts(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_char_p), ("n_threads", ctypes.c_int), ("device", ctypes.c_int)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("ne", ctypes.c_int64 * _MAX_DIMS), ("bytes", ctypes.c_size_t)]


_lib = None
_lib_path = None


def _declare(lib):
    P, I, I64, S, SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t
    sigs = {
        "gp_model_load": (P, [S, ctypes.c_char_p, SZ]),
        "gp_model_load_mem": (P, [ctypes.c_char_p, SZ, S, ctypes.c_char_p, SZ]),
        "gp_model_free": (None, [P]),
        "gp_model_bind_weights": (I, [P, S, ctypes.c_char_p, SZ]),
        "gp_model_random_weights": (I, [P, ctypes.c_uint64, ctypes.c_char_p, SZ]),
        "gp_model_get_info": (None, [P, ctypes.POINTER(_ModelInfo)]),
        "gp_model_dim_count": (I, [P]),
        "gp_model_dim": (I, [P, I, ctypes.POINTER(S), ctypes.POINTER(I64)]),
        "gp_session_new": (P, [P, ctypes.POINTER(_SessionOpts), ctypes.c_char_p, SZ]),
        "gp_session_free": (None, [P]),
        "gp_session_error": (S, [P]),
        "gp_session_set_dim": (I, [P, S, I64]),
        "gp_session_set_input": (I, [P, S, ctypes.c_void_p, SZ]),
        "gp_session_set_tokens": (I, [P, ctypes.POINTER(ctypes.c_int32),
                                      ctypes.POINTER(ctypes.c_int32), I64]),
        "gp_session_set_rows": (I, [P, ctypes.POINTER(ctypes.c_int32), I64]),
        "gp_session_eval": (I, [P]),
        "gp_session_output": (ctypes.c_void_p, [P, S, ctypes.POINTER(_TensorInfo)]),
        "gp_argmax": (I64, [ctypes.POINTER(ctypes.c_float), I64]),
        "gp_session_reset": (I, [P]),
        "gp_session_eval_count": (I64, [P]),
        "gp_session_backend": (S, [P]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def _load():
    """libgplan, loaded once: GPLAN_LIBRARY, else the system's libgplan.so.0."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    env = os.environ.get("GPLAN_LIBRARY")
    candidates = [env] if env else ["libgplan.so.0", ctypes.util.find_library("gplan")]
    errors = []
    for c in candidates:
        if not c:
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError as e:
            errors.append(str(e))
            continue
        _declare(lib)
        _lib, _lib_path = lib, c
        return lib
    raise Error("cannot load libgplan (set GPLAN_LIBRARY to libgplan.so's path, or install "
                "gplan): " + "; ".join(errors or ["not found"]))


def library_path():
    """The name or path libgplan was loaded from."""
    _load()
    return _lib_path


def _enc(s):
    return s.encode() if isinstance(s, str) else bytes(s)


def _err_buf():
    return ctypes.create_string_buffer(4096)


class Model:
    """A loaded plan and its weights: Model(plan_path), then bind_weights or random_weights."""

    def __init__(self, plan_path):
        lib = _load()
        err = _err_buf()
        self._h = lib.gp_model_load(_enc(os.fspath(plan_path)), err, len(err))
        if not self._h:
            raise Error(err.value.decode(errors="replace"))
        self._sessions = weakref.WeakSet()

    def _handle(self):
        if not self._h:
            raise Error("the model is closed")
        return self._h

    def bind_weights(self, path):
        """Binds a checkpoint (safetensors file, index json or folder); returns the model."""
        err = _err_buf()
        if _lib.gp_model_bind_weights(self._handle(), _enc(os.fspath(path)), err, len(err)):
            raise Error(err.value.decode(errors="replace"))
        return self

    def random_weights(self, seed):
        """Binds deterministic random weights (a function of seed and weight name)."""
        err = _err_buf()
        if _lib.gp_model_random_weights(self._handle(), int(seed), err, len(err)):
            raise Error(err.value.decode(errors="replace"))
        return self

    @property
    def info(self):
        """gp_model_get_info as a dict (names are str or None)."""
        i = _ModelInfo()
        _lib.gp_model_get_info(self._handle(), ctypes.byref(i))
        out = {}
        for name, _ in _ModelInfo._fields_:
            if name == "_spare":
                continue
            v = getattr(i, name)
            if isinstance(v, bytes):
                v = v.decode()
            elif name == "region_bytes":
                v = list(v)
            out[name] = v
        return out

    @property
    def dims(self):
        """The symbolic (runtime) dims: [(name, bound), ...]."""
        h = self._handle()
        out = []
        for k in range(_lib.gp_model_dim_count(h)):
            name, bound = ctypes.c_char_p(), ctypes.c_int64()
            if _lib.gp_model_dim(h, k, ctypes.byref(name), ctypes.byref(bound)) == 0:
                out.append((name.value.decode(), bound.value))
        return out

    def close(self):
        """Frees the model, and first every session still open on it."""
        for s in list(self._sessions):
            s.close()
        if self._h:
            _lib.gp_model_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _lib is not None:
            self.close()


class Session:
    """One running instance of a model: Session(model, backend="cpu", threads=1)."""

    def __init__(self, model, backend="cpu", threads=1, device=0):
        err = _err_buf()
        self._backend = _enc(backend)  # kept alive while the session exists
        opts = _SessionOpts(self._backend, int(threads), int(device))
        self._h = _lib.gp_session_new(model._handle(), ctypes.byref(opts), err, len(err))
        if not self._h:
            raise Error(err.value.decode(errors="replace"))
        self.model = model  # the model outlives its sessions
        self._info = model.info
        model._sessions.add(self)

    def _handle(self):
        if not self._h:
            raise Error("the session is closed")
        return self._h

    def _check(self, rc):
        if rc:
            raise Error(_lib.gp_session_error(self._h).decode(errors="replace"))

    @property
    def backend(self):
        return _lib.gp_session_backend(self._handle()).decode()

    @property
    def eval_count(self):
        return _lib.gp_session_eval_count(self._handle())

    def set_dim(self, name, value):
        self._check(_lib.gp_session_set_dim(self._handle(), _enc(name), int(value)))

    def set_input(self, name, data):
        """Copies an input: bytes, or anything with the buffer protocol (a numpy array)."""
        buf = bytes(memoryview(data).cast("B"))
        self._check(_lib.gp_session_set_input(self._handle(), _enc(name), buf, len(buf)))

    def set_tokens(self, ids, pos=None, start=0):
        """Tokens ids at positions pos (default start, start + 1, ...); sets the tokens' dim. A
        graph with a rows input (info["rows"]) then computes the last token's logits only:
        set_rows() after this asks for every token's."""
        ids = [int(i) for i in ids]
        pos = list(range(start, start + len(ids))) if pos is None else [int(p) for p in pos]
        if len(pos) != len(ids):
            raise Error("set_tokens: %d ids but %d positions" % (len(ids), len(pos)))
        n = len(ids)
        a = (ctypes.c_int32 * max(n, 1))(*ids)
        p = (ctypes.c_int32 * max(n, 1))(*pos)
        self._check(_lib.gp_session_set_tokens(self._handle(), a, p, n))
        self._n_tokens = n

    def set_rows(self, rows=None):
        """After set_tokens: the logits of these token indices (logits row i is token rows[i]),
        or with None every token's of the last set_tokens."""
        if rows is None:
            self._check(_lib.gp_session_set_rows(self._handle(), None,
                                                 getattr(self, "_n_tokens", 0)))
            return
        rows = [int(r) for r in rows]
        a = (ctypes.c_int32 * max(len(rows), 1))(*rows)
        self._check(_lib.gp_session_set_rows(self._handle(), a, len(rows)))

    def eval(self):
        self._check(_lib.gp_session_eval(self._handle()))

    def reset(self):
        """Zeroes the state (KV cache) to start a new sequence."""
        self._check(_lib.gp_session_reset(self._handle()))

    def _raw_output(self, name):
        info = _TensorInfo()
        ptr = _lib.gp_session_output(self._handle(), _enc(name), ctypes.byref(info))
        if not ptr:
            raise Error("output: no output named %r" % name)
        shape = [info.ne[d] for d in range(info.ndim)]
        dtype = DTYPES[info.dtype] if 0 <= info.dtype < len(DTYPES) else str(info.dtype)
        return ctypes.string_at(ptr, info.bytes), dtype, shape

    def output(self, name, numpy=None):
        """An output after the last eval, copied: a numpy array of its shape, or nested lists
        when numpy is not installed (or numpy=False)."""
        data, dtype, shape = self._raw_output(name)
        if dtype not in _FORMATS:
            raise Error("output: %r has dtype %s, which the binding does not convert" % (name, dtype))
        if numpy is not False:
            try:
                import numpy as np
            except ImportError:
                if numpy:
                    raise
            else:
                return np.frombuffer(data, dtype=_NUMPY[dtype]).reshape(shape).copy()
        flat = list(struct.unpack("<%d%s" % (len(data) // struct.calcsize(_FORMATS[dtype]),
                                              _FORMATS[dtype]), data))
        for n in reversed(shape[1:]):
            flat = [flat[i:i + n] for i in range(0, len(flat), n)]
        return flat

    def _last_row_argmax(self):
        """gp_argmax of the last row of the logits (no copy): [R, vocab], R = 1 with a rows
        input, else the eval's tokens."""
        info = _TensorInfo()
        ptr = _lib.gp_session_output(self._h, _enc(self._info["logits"]), ctypes.byref(info))
        vocab = self._info["vocab"]
        n = info.ne[0] if info.ndim >= 1 else 1
        row = ctypes.cast(ptr + (n - 1) * vocab * 4, ctypes.POINTER(ctypes.c_float))
        return int(_lib.gp_argmax(row, vocab))

    def generate(self, prompt_ids, n, eos=None):
        """Greedy generation from the start of a sequence: the prompt in evals of at most the
        planned tokens, then n tokens one eval each (fewer at eos or at the end of the planned
        context). Returns the new ids, as gplan-run --prompt-ids prints them."""
        info = self._info
        if not info["tokens"] or not info["logits"] or info["vocab"] < 1:
            raise Error("generate: not a language model (needs tokens, positions and logits)")
        prompt = [int(i) for i in prompt_ids] or [0]
        ctx = info["context"] if info["context"] > 0 else None
        if ctx is not None and len(prompt) > ctx:
            raise Error("generate: the prompt has %d tokens, more than the planned context of %d "
                        "positions" % (len(prompt), ctx))
        self.reset()
        past, chunk = 0, info["max_tokens"]
        for i in range(0, len(prompt), chunk):
            part = prompt[i:i + chunk]
            self.set_tokens(part, start=past)
            self.eval()
            past += len(part)
        out = []
        while len(out) < n:
            tok = self._last_row_argmax()
            out.append(tok)
            if (eos is not None and tok == eos) or len(out) == n or (ctx is not None and past >= ctx):
                break
            self.set_tokens([tok], start=past)
            self.eval()
            past += 1
        return out

    def close(self):
        if self._h:
            _lib.gp_session_free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _lib is not None:
            self.close()
