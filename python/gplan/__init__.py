"""gplan from Python: ctypes over libgplan.so (<gplan/text.h> and <gplan/gplan.h>).

Text in and out (the text API):

    m = gplan.Model("SmolLM2-135M-Instruct.Q4_1.gguf")
    print(m.generate("The capital of France is", max_tokens=8))
    for piece in m.generate("Once upon a time", max_tokens=32, temperature=0.8, stream=True):
        print(piece, end="", flush=True)
    print(m.chat([{"role": "user", "content": "Hi!"}]))

Token ids in and out (the session API), on any model, a plan file's included:

    m = gplan.Model("tiny.plan").random_weights(1)
    s = gplan.Session(m, backend="cpu", threads=1)
    ids = s.generate([1, 2, 3], 8)

The library is GPLAN_LIBRARY (a path) when set, else libgplan.so.0 from the system's library path.
Every failure raises gplan.Error with the library's message.
"""
import ctypes
import ctypes.util
import dataclasses
import os
import struct
import weakref

__all__ = ["Error", "ContextError", "Model", "Result", "Session", "chat_formats", "library_path",
           "DTYPES"]
__version__ = "0.1.0"

_MAX_DIMS = 4  # GP_MAX_DIMS
# gp_dtype's values (gplan_types.h): name, struct format of one element (None: no element size).
DTYPES = ["f32", "f16", "bf16", "i32", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k",
          "q6_k"]
_FORMATS = {"f32": "f", "f16": "e", "i32": "i"}
_NUMPY = {"f32": "float32", "f16": "float16", "i32": "int32"}
_SEQ_TOO_LONG = 1  # GP_SEQ_TOO_LONG
_FINISH_NONE = 0   # GP_FINISH_NONE


class Error(Exception):
    """A failure reported by libgplan; str(e) is its message."""


class ContextError(Error):
    """A prompt or conversation that does not fit in the model's context (GP_SEQ_TOO_LONG)."""


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


# ---- the C structs of text.h, field by field ----

# int (*on_text)(void *user, const char *text, size_t len); int (*on_token)(void *user, int32_t id)
_ON_TEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_ON_TOKEN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32)


class _LmOpts(ctypes.Structure):
    _fields_ = [("plan", ctypes.c_char_p), ("tokenizer", ctypes.c_char_p),
                ("defines", ctypes.POINTER(ctypes.c_char_p)), ("n_defines", ctypes.c_int),
                ("context", ctypes.c_int64), ("batch", ctypes.c_int64),
                ("cache_dir", ctypes.c_char_p), ("backend", ctypes.c_char_p),
                ("n_threads", ctypes.c_int), ("device", ctypes.c_int),
                ("allow_unused", ctypes.c_int), ("random_weights", ctypes.c_int),
                ("random_seed", ctypes.c_uint64), ("n_seq", ctypes.c_int),
                ("kv_positions", ctypes.c_int64), ("chat_format", ctypes.c_char_p),
                ("lora", ctypes.c_char_p), ("lora_merge_plan", ctypes.c_char_p),
                ("lora_scale", ctypes.c_double), ("memory", ctypes.c_int64)]


class _Msg(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class _SamplerOpts(ctypes.Structure):
    _fields_ = [("temp", ctypes.c_double), ("top_k", ctypes.c_int64), ("top_p", ctypes.c_double),
                ("min_p", ctypes.c_double), ("repeat_penalty", ctypes.c_double),
                ("repeat_last_n", ctypes.c_int64), ("seed", ctypes.c_uint64)]


class _GenOpts(ctypes.Structure):
    _fields_ = [("max_tokens", ctypes.c_int64), ("stop", ctypes.POINTER(ctypes.c_char_p)),
                ("n_stop", ctypes.c_int), ("ignore_eos", ctypes.c_int), ("eos", ctypes.c_int64),
                ("on_text", _ON_TEXT), ("on_token", _ON_TOKEN), ("user", ctypes.c_void_p),
                ("restart", ctypes.c_int)]


class _GenResult(ctypes.Structure):
    _fields_ = [("finish", ctypes.c_int), ("prompt_tokens", ctypes.c_int64),
                ("cached_tokens", ctypes.c_int64), ("completion_tokens", ctypes.c_int64),
                ("prompt_ms", ctypes.c_double), ("gen_ms", ctypes.c_double),
                ("prompt_evals", ctypes.c_int64), ("gen_evals", ctypes.c_int64),
                ("prompt_rows", ctypes.c_int64), ("stop_token", ctypes.c_int32)]


_lib = None
_lib_path = None


def _declare(lib):
    P, I, I64, S, SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_char_p, ctypes.c_size_t
    B = ctypes.c_char_p  # a caller's buffer (an error message, text out)
    IDS = ctypes.POINTER(ctypes.c_int32)
    sigs = {
        "gp_model_load": (P, [S, B, SZ]),
        "gp_model_load_mem": (P, [B, SZ, S, B, SZ]),
        "gp_model_free": (None, [P]),
        "gp_model_bind_weights": (I, [P, S, B, SZ]),
        "gp_model_random_weights": (I, [P, ctypes.c_uint64, B, SZ]),
        "gp_model_get_info": (None, [P, ctypes.POINTER(_ModelInfo)]),
        "gp_model_dim_count": (I, [P]),
        "gp_model_dim": (I, [P, I, ctypes.POINTER(S), ctypes.POINTER(I64)]),
        "gp_session_new": (P, [P, ctypes.POINTER(_SessionOpts), B, SZ]),
        "gp_session_free": (None, [P]),
        "gp_session_error": (S, [P]),
        "gp_session_set_dim": (I, [P, S, I64]),
        "gp_session_set_input": (I, [P, S, ctypes.c_void_p, SZ]),
        "gp_session_set_tokens": (I, [P, IDS, IDS, I64]),
        "gp_session_set_rows": (I, [P, IDS, I64]),
        "gp_session_eval": (I, [P]),
        "gp_session_output": (ctypes.c_void_p, [P, S, ctypes.POINTER(_TensorInfo)]),
        "gp_argmax": (I64, [ctypes.POINTER(ctypes.c_float), I64]),
        "gp_session_reset": (I, [P]),
        "gp_session_eval_count": (I64, [P]),
        "gp_session_backend": (S, [P]),
        # text.h
        "gp_lm_load": (P, [S, ctypes.POINTER(_LmOpts), B, SZ]),
        "gp_lm_defaults": (_LmOpts, []),
        "gp_lm_free": (None, [P]),
        "gp_lm_is_model": (I, [S]),
        "gp_lm_model": (P, [P]),
        "gp_lm_plan_path": (S, [P]),
        "gp_lm_arch": (S, [P]),
        "gp_lm_context": (I64, [P]),
        "gp_lm_vocab": (I64, [P]),
        "gp_lm_has_tokenizer": (I, [P]),
        "gp_lm_is_eog": (I, [P, ctypes.c_int32]),
        "gp_lm_tokenize": (I64, [P, S, SZ, I, IDS, I64, B, SZ]),
        "gp_lm_detokenize": (I64, [P, IDS, I64, B, SZ]),
        "gp_lm_chat_apply": (I64, [P, ctypes.POINTER(_Msg), SZ, I, B, SZ, B, SZ]),
        "gp_lm_set_chat_format": (I, [P, S, B, SZ]),
        "gp_lm_chat_formats": (S, []),
        "gp_lm_has_chat": (I, [P]),
        "gp_sampler_defaults": (_SamplerOpts, []),
        "gp_seq_new": (P, [P, ctypes.POINTER(_SamplerOpts), B, SZ]),
        "gp_seq_free": (None, [P]),
        "gp_seq_error": (S, [P]),
        "gp_seq_session": (P, [P]),
        "gp_seq_set_sampler": (I, [P, ctypes.POINTER(_SamplerOpts)]),
        "gp_seq_reset": (None, [P]),
        "gp_seq_length": (I64, [P]),
        "gp_finish_name": (S, [I]),
        "gp_gen_defaults": (_GenOpts, []),
        "gp_seq_start": (I, [P, IDS, I64, I, ctypes.POINTER(_GenOpts)]),
        "gp_seq_start_text": (I, [P, S, SZ, I, ctypes.POINTER(_GenOpts)]),
        "gp_seq_start_chat": (I, [P, ctypes.POINTER(_Msg), SZ, ctypes.POINTER(_GenOpts)]),
        "gp_seq_step": (I, [P]),
        "gp_seq_text": (ctypes.c_void_p, [P, ctypes.POINTER(SZ)]),
        "gp_seq_reply": (ctypes.c_void_p, [P, ctypes.POINTER(SZ)]),
        "gp_seq_cancel": (None, [P]),
        "gp_seq_result": (None, [P, ctypes.POINTER(_GenResult)]),
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




def _dec(b):
    return b.decode("utf-8", errors="replace")


def _seed(what, v):
    v = int(v)
    if not 0 <= v < 1 << 64:
        raise Error("%s: the seed must be in [0, 2^64), not %d" % (what, v))
    return v


class _Closes:
    """A with-block's object whose close() frees its handle _h, also when it is collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) and _lib is not None:
            self.close()


@dataclasses.dataclass(frozen=True)
class Result:
    """The counts and times of a model's last generation (gp_gen_result)."""
    finish: str             # "length", "stop", "context", "cancel"; "" while it runs
    prompt_tokens: int      # the prompt's tokens
    cached_tokens: int      # of which already in the KV cache (a shared prefix): not evaluated
    completion_tokens: int  # generated
    prompt_ms: float        # time in the prompt's evals
    gen_ms: float           # time in the generated tokens' evals
    prompt_evals: int
    gen_evals: int
    prompt_rows: int        # tokens evaluated by the prompt's evals
    stop_token: int         # the end-of-generation id that ended it (not emitted), or -1


class Model(_Closes):
    """A model: a plan and its weights, with the text API when loaded from a model file.

    Model(path, ...) decides by what it is given:
      - a GGUF file (magic "GGUF") or a Hugging Face folder (config.json, safetensors,
        tokenizer.json): a text model (gp_lm_load). The graph of the file's architecture is planned
        in process and the plan cached (cache_dir); weights and tokenizer come from the file.
      - Model(weights, plan="x.plan"): a text model of that plan with the weights of a checkpoint;
        Model(None, plan="x.plan", random_weights=SEED) with random weights (tokenizer= names
        the tokenizer then). A plan file with any of the options below, Model("x.plan",
        random_weights=SEED, ...), is the same as Model(None, plan="x.plan", ...).
      - a plan file alone, Model("x.plan"): the plan without weights, as before the text API:
        bind_weights or random_weights, then Session. Its text methods raise Error.
    A text model has generate, chat, tokenize, detokenize and the session API too: Session(model)
    runs token ids on its plan and weights (its bind_weights and random_weights raise Error: the
    weights are bound when it loads).

    Options (text models): tokenizer (a .gguf, tokenizer.json or folder; "" for none), defines
    (graph parameters, a dict or ["NAME=VALUE", ...], as gplan-compile -D), context (KV-cache
    positions; 0: the file's, at most 4096), batch (tokens per eval; 0: 512), cache_dir (plans'
    cache; None: $GPLAN_CACHE_DIR, else ~/.cache/gplan; "": none), backend ("cpu", "reference",
    "cuda"), threads (0: the online cores), device (CUDA ordinal), random_weights (a seed: random
    weights instead of the file's), chat_format (a built-in chat format by name instead of the
    model's template: gplan.chat_formats()), lora (a PEFT adapter folder: merged into the weights
    by lora_merge_plan, a plan of gplan-compile -D lora_r=R --lora-merge, or without one bound
    into the adapter slots of a plan compiled with -D lora_r=R), lora_scale (times lora_alpha/r),
    memory (bytes the plan may hold on its device: with no context given, the largest context
    that fits; else a plan over it raises Error).

    Generation runs on one sequence per model (its KV cache kept between calls, so a prompt that
    continues the last one evaluates only the rest): one generation at a time. A call that starts
    while a stream is unfinished ends that stream (its next step raises Error).
    """

    def __init__(self, path=None, *, plan=None, tokenizer=None, defines=None, context=0, batch=0,
                 cache_dir=None, backend="cpu", threads=0, device=0, random_weights=None,
                 chat_format=None, lora=None, lora_merge_plan=None, lora_scale=1.0, memory=0):
        lib = _load()
        self._h = None        # gp_model*: the plan model's own, or the text model's gp_lm_model
        self._lm = None       # gp_lm*: text models only
        self._seq = None      # gp_seq*: created at the first generation
        self._active = None   # the unfinished stream on _seq
        self._sampler = None  # the sampler options _seq has
        self._sessions = weakref.WeakSet()
        p = None if path is None or os.fspath(path) in ("", b"") else os.fspath(path)
        text_opts = (tokenizer is not None or defines or context or batch or cache_dir is not None
                     or backend != "cpu" or threads or device or random_weights is not None
                     or chat_format is not None or lora is not None or memory)
        if plan is None and p is not None and not lib.gp_lm_is_model(_enc(p)):
            if not text_opts:
                err = _err_buf()
                self._h = lib.gp_model_load(_enc(p), err, len(err))
                if not self._h:
                    raise Error(_dec(err.value))
                self._plan_path = p
                return
            plan, p = p, None  # a plan file with options: its text model, no checkpoint
        o = lib.gp_lm_defaults()
        o.plan = None if plan is None else _enc(os.fspath(plan))
        o.tokenizer = None if tokenizer is None else _enc(os.fspath(tokenizer))
        if isinstance(defines, dict):
            defines = ["%s=%s" % kv for kv in defines.items()]
        defs = [_enc(d) for d in (defines or [])]
        o.defines = (ctypes.c_char_p * max(len(defs), 1))(*defs)  # o keeps them alive
        o.n_defines = len(defs)
        o.context, o.batch = int(context), int(batch)
        o.cache_dir = None if cache_dir is None else _enc(os.fspath(cache_dir))
        o.backend = _enc(backend) if backend else None
        o.n_threads, o.device = int(threads), int(device)
        if random_weights is not None:
            o.random_weights, o.random_seed = 1, _seed("random_weights", random_weights)
        o.chat_format = None if chat_format is None else _enc(chat_format)
        o.lora = None if lora is None else _enc(os.fspath(lora))
        o.lora_merge_plan = None if lora_merge_plan is None else _enc(os.fspath(lora_merge_plan))
        o.lora_scale = float(lora_scale)
        o.memory = int(memory)
        err = _err_buf()
        self._lm = lib.gp_lm_load(None if p is None else _enc(p), ctypes.byref(o), err, len(err))
        if not self._lm:
            raise Error(_dec(err.value))
        self._h = lib.gp_lm_model(self._lm)

    def _handle(self):
        if not self._h:
            raise Error("the model is closed")
        return self._h

    def _text(self, what):
        """The gp_lm*, or Error for a plan model or a closed one."""
        self._handle()
        if not self._lm:
            raise Error("%s: %s is a plan without the text API: load it with its weights, "
                        "gplan.Model(WEIGHTS, plan=PLAN), or gplan.Model(PLAN, random_weights=SEED)"
                        % (what, self._plan_path))
        return self._lm

    # ---- the session API's model calls ----

    def bind_weights(self, path):
        """Binds a checkpoint (safetensors file, index json or folder); returns the model."""
        h = self._handle()
        if self._lm:
            raise Error("bind_weights: a text model binds its weights when it loads "
                        "(gplan.Model(WEIGHTS, plan=PLAN))")
        err = _err_buf()
        if _lib.gp_model_bind_weights(h, _enc(os.fspath(path)), err, len(err)):
            raise Error(_dec(err.value))
        return self

    def random_weights(self, seed):
        """Binds deterministic random weights (a function of seed and weight name)."""
        h = self._handle()
        if self._lm:
            raise Error("random_weights: a text model binds its weights when it loads "
                        "(gplan.Model(..., random_weights=SEED))")
        err = _err_buf()
        if _lib.gp_model_random_weights(h, _seed("random_weights", seed), err, len(err)):
            raise Error(_dec(err.value))
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

    # ---- what the model is ----

    @property
    def context(self):
        """Positions a sequence holds (0: the graph has no KV cache)."""
        if self._lm:
            return _lib.gp_lm_context(self._lm)
        return max(self.info["context"], 0)

    @property
    def vocab(self):
        """Logits per row."""
        if self._lm:
            return _lib.gp_lm_vocab(self._lm)
        return self.info["vocab"]

    @property
    def arch(self):
        """The file's architecture ("llama", ...); "" for a given plan."""
        self._handle()
        return _lib.gp_lm_arch(self._lm).decode() if self._lm else ""

    @property
    def plan_path(self):
        """The plan file used: the cache's or the one given; "" when planned in memory."""
        self._handle()
        return _lib.gp_lm_plan_path(self._lm).decode() if self._lm else self._plan_path

    # ---- text ----

    def tokenize(self, text, add_special=True):
        """Text to ids (special tokens' texts become their ids; add_special adds BOS/EOS as the
        vocabulary says)."""
        lm = self._text("tokenize")
        b = _enc(text)
        err = _err_buf()
        cap = len(b) + 16
        while True:
            ids = (ctypes.c_int32 * cap)()
            n = _lib.gp_lm_tokenize(lm, b, len(b), int(bool(add_special)), ids, cap, err, len(err))
            if n < 0:
                raise Error("tokenize: " + _dec(err.value))
            if n <= cap:
                return ids[:n]
            cap = n

    def detokenize(self, ids):
        """Ids to text (special tokens rendered as their texts; bytes that are not UTF-8 as
        U+FFFD)."""
        lm = self._text("detokenize")
        ids = [int(i) for i in ids]
        if not _lib.gp_lm_has_tokenizer(lm):
            raise Error("detokenize: the model has no tokenizer")
        for k, i in enumerate(ids):
            if not -(1 << 31) <= i < 1 << 31:
                raise Error("detokenize: ids[%d] = %d is not a token id" % (k, i))
        a = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        cap = 8 * len(ids) + 16
        while True:
            out = ctypes.create_string_buffer(cap)
            n = _lib.gp_lm_detokenize(lm, a, len(ids), out, cap)
            if n < 0:
                bad = next((k for k, i in enumerate(ids)
                            if _lib.gp_lm_detokenize(lm, (ctypes.c_int32 * 1)(i), 1, None, 0) < 0),
                           0)
                raise Error("detokenize: ids[%d] = %d is outside the tokenizer's vocabulary"
                            % (bad, ids[bad]))
            if n < cap:
                return _dec(out.raw[:n])
            cap = n + 1

    def format_chat(self, messages, add_assistant=True):
        """The conversation as the chat template writes it (with the start of the assistant's
        reply when add_assistant)."""
        lm = self._text("format_chat")
        msgs, _keep = _messages(messages)
        err = _err_buf()
        cap = 4096
        while True:
            out = ctypes.create_string_buffer(cap)
            n = _lib.gp_lm_chat_apply(lm, msgs, len(messages), int(bool(add_assistant)), out, cap,
                                      err, len(err))
            if n < 0:
                raise Error("format_chat: " + _dec(err.value))
            if n < cap:
                return _dec(out.raw[:n])
            cap = n + 1

    # ---- generating ----

    def _sequence(self, what, sampler):
        """The model's gp_seq (made at the first call) with these sampler options, the unfinished
        stream ended first."""
        lm = self._text(what)
        if self._active is not None:
            self._active._end(superseded=True)
        if not self._seq:
            err = _err_buf()
            self._seq = _lib.gp_seq_new(lm, None, err, len(err))
            if not self._seq:
                raise Error("%s: %s" % (what, _dec(err.value)))
            self._sampler = None
        if sampler != self._sampler:
            temp, top_k, top_p, min_p, penalty, last_n, seed = sampler
            so = _SamplerOpts(float(temp), int(top_k), float(top_p), float(min_p), float(penalty),
                              int(last_n), _seed(what, seed))
            if _lib.gp_seq_set_sampler(self._seq, ctypes.byref(so)):
                raise Error("%s: %s" % (what, _dec(_lib.gp_seq_error(self._seq))))
            self._sampler = sampler
        return self._seq

    @staticmethod
    def _gen_opts(max_tokens, stop, ignore_eos):
        g = _lib.gp_gen_defaults()
        g.max_tokens = -1 if max_tokens is None else int(max_tokens)
        stops = [stop] if isinstance(stop, (str, bytes)) else list(stop or [])
        arr = (ctypes.c_char_p * max(len(stops), 1))(*[_enc(s) for s in stops])
        g.stop, g.n_stop = arr, len(stops)  # the library copies the strings at the start
        g.ignore_eos = int(bool(ignore_eos))
        return g

    def _run(self, what, start, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty,
             repeat_last_n, seed, stop, ignore_eos, stream):
        """Starts a generation with start(seq, gen_opts) and runs it, or returns its stream."""
        seq = self._sequence(what, (temperature, top_k, top_p, min_p, repeat_penalty,
                                    repeat_last_n, seed))
        g = self._gen_opts(max_tokens, stop, ignore_eos)
        pieces = []
        if stream:
            def on_text(_user, text, n):
                pieces.append(ctypes.string_at(text, n))
                return 0
            g.on_text = _ON_TEXT(on_text)  # g, and so the stream, keeps it alive
        rc = start(seq, ctypes.byref(g))
        if rc:
            msg = "%s: %s" % (what, _dec(_lib.gp_seq_error(seq)))
            raise ContextError(msg) if rc == _SEQ_TOO_LONG else Error(msg)
        if stream:
            self._active = _Stream(self, what, g, pieces)
            return self._active
        while True:
            rc = _lib.gp_seq_step(seq)
            if rc < 0:
                raise Error("%s: %s" % (what, _dec(_lib.gp_seq_error(seq))))
            if rc != _FINISH_NONE:
                n = ctypes.c_size_t()
                p = _lib.gp_seq_text(seq, ctypes.byref(n))
                return _dec(ctypes.string_at(p, n.value)) if n.value else ""

    def generate(self, text, max_tokens=16, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0,
                 repeat_penalty=1.0, seed=1, stop=None, ignore_eos=False, stream=False,
                 repeat_last_n=64):
        """Continues text (tokenized with BOS/EOS as the vocabulary says): the generated text, or
        with stream=True an iterator of its pieces (whole UTF-8 characters, each as it becomes
        final; closing it early cancels the generation).

        max_tokens: at most this many tokens (None: until the context is full). Sampling, in
        Hugging Face's order: repeat_penalty over the last repeat_last_n ids (1: off),
        temperature (0: greedy), top_k (0: off), top_p (1: off), min_p (0: off); the same seed
        and prompt give the same text. stop: a string or a list of at most 16 that end the text
        (not part of it). ignore_eos: go on past end-of-generation tokens. The prompt keeps the
        prefix that the model's KV cache already holds. last_result has the counts and times.
        Raises ContextError when the prompt does not fit in the context."""
        b = _enc(text)

        def start(seq, g):
            return _lib.gp_seq_start_text(seq, b, len(b), 1, g)
        return self._run("generate", start, max_tokens, temperature, top_k, top_p, min_p,
                         repeat_penalty, repeat_last_n, seed, stop, ignore_eos, stream)

    def chat(self, messages, max_tokens=16, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0,
             repeat_penalty=1.0, seed=1, stop=None, ignore_eos=False, stream=False,
             repeat_last_n=64):
        """The assistant's reply to a conversation, [{"role": "system" | "user" | "assistant",
        "content": str}, ...], formatted with the chat template; options as generate's. The
        reply is kept in the KV cache, so the next turn (the conversation with this reply as an
        assistant message, then a new user message) evaluates only the new messages. Raises
        ContextError when the conversation leaves no position for the reply."""
        msgs, keep = _messages(messages)

        def start(seq, g):
            return _lib.gp_seq_start_chat(seq, msgs, len(keep), g)
        return self._run("chat", start, max_tokens, temperature, top_k, top_p, min_p,
                         repeat_penalty, repeat_last_n, seed, stop, ignore_eos, stream)

    @property
    def last_result(self):
        """The Result of the last generation (counts so far while a stream runs), or None."""
        if not self._seq:
            return None
        r = _GenResult()
        _lib.gp_seq_result(self._seq, ctypes.byref(r))
        return Result(_lib.gp_finish_name(r.finish).decode(), r.prompt_tokens, r.cached_tokens,
                      r.completion_tokens, r.prompt_ms, r.gen_ms, r.prompt_evals, r.gen_evals,
                      r.prompt_rows, r.stop_token)

    def reset(self):
        """Forgets the sequence: the next prompt is evaluated from position 0."""
        self._text("reset")
        if self._active is not None:
            self._active._end(superseded=True)
        if self._seq:
            _lib.gp_seq_reset(self._seq)

    # ---- closing ----

    def close(self):
        """Frees the model, and first every session still open on it and its sequence."""
        for s in list(self._sessions):
            s.close()
        if self._active is not None:
            self._active._end(superseded=True)
        if self._seq:
            _lib.gp_seq_free(self._seq)
            self._seq = None
        if self._lm:
            _lib.gp_lm_free(self._lm)  # and its gp_model
            self._lm = None
        elif self._h:
            _lib.gp_model_free(self._h)
        self._h = None


def _messages(messages):
    """[{"role", "content"}, ...] as a gp_msg array, and the bytes it points to (keep alive)."""
    keep = []
    for k, m in enumerate(messages):
        try:
            keep.append((_enc(m["role"]), _enc(m["content"])))
        except (KeyError, TypeError):
            raise Error("message %d: not a {\"role\": str, \"content\": str} dict" % k) from None
    arr = (_Msg * max(len(keep), 1))(*[_Msg(r, c) for r, c in keep])
    return arr, keep


def chat_formats():
    """The built-in chat formats' names (Model(..., chat_format=NAME))."""
    return [f.strip() for f in _load().gp_lm_chat_formats().decode().split(",")]


class _Stream:
    """generate/chat(stream=True): each next() steps the sequence (gp_seq_step) until a piece of
    text is final; the pieces come from on_text, collected during the step."""

    def __init__(self, model, what, g, pieces):
        self._model, self._what = model, what
        self._g = g            # holds the on_text callback the sequence calls
        self._pieces = pieces  # what on_text collected since the last next()
        self._done = False
        self._superseded = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._superseded:
            raise Error("%s: the stream was ended by a later call on its model" % self._what)
        if self._done:
            raise StopIteration
        seq = self._model._seq
        while True:
            rc = _lib.gp_seq_step(seq)
            if rc < 0:
                self._detach()
                raise Error("%s: %s" % (self._what, _dec(_lib.gp_seq_error(seq))))
            if rc != _FINISH_NONE:
                self._detach()
            if self._pieces:
                text = "".join(_dec(p) for p in self._pieces)
                self._pieces.clear()
                return text
            if rc != _FINISH_NONE:
                raise StopIteration

    def _detach(self):
        self._done = True
        if self._model._active is self:
            self._model._active = None

    def _end(self, superseded=False):
        """Finishes a generation that still runs (cancelled) and detaches from the model."""
        m = self._model
        if not self._done and m._active is self and m._seq:
            _lib.gp_seq_cancel(m._seq)
            _lib.gp_seq_step(m._seq)  # finishes: flushes through on_text, which is still alive
            self._superseded = superseded
        self._pieces.clear()
        self._detach()

    def close(self):
        """Cancels the generation if it still runs; the model's sequence stays usable."""
        self._end()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if not getattr(self, "_done", True) and _lib is not None:
            self._end()


class Session(_Closes):
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
