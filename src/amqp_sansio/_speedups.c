/* Optional C decoder for AMQP field tables: the same results as amqp_sansio._table's
 * pure-Python decode_table, several times faster. A Builder does the same for the arguments of
 * a generated method or content properties class, storing each value straight into its slot of
 * a new instance (as the generated Python decoder's object.__new__ and slot stores would), and
 * encode_table encodes tables of the common types, under the same rule.
 *
 * It decodes only what it can decode exactly as the Python code does: well-formed tables of
 * the common value types. Anything else (a truncated or malformed table, an unknown or rare
 * type code -- A, T, D --, a key that is not UTF-8, a table past the depth or entry limits,
 * a buffer that is not bytes) makes it hand the whole table to the Python decoder, which
 * raises the precise error or returns the value. So errors, and the rare types, have one
 * implementation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifndef Py_T_OBJECT_EX /* before 3.12 the member types and flags are structmember.h's */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_T_INT T_INT
#define Py_READONLY READONLY
#endif

/* Must match amqp_sansio._table: MAX_TABLE_DEPTH and MAX_TABLE_ENTRIES (checked at import). */
#define MAX_TABLE_DEPTH 32
#define MAX_TABLE_ENTRIES 65536
/* The interface amqp_sansio._table expects (_SPEEDUPS_VERSION): a build from other sources
 * is not used. 2: unpack_fields and unpack_properties; 3: encode_table; 4: set_fallbacks;
 * 5: Builder instead of unpack_fields and unpack_properties. */
#define SPEEDUPS_VERSION 5

/* The pure-Python decode_table and encode_table, which take over what C does not do. */
static PyObject *decode_fallback = NULL;
static PyObject *encode_fallback = NULL;

static PyObject *defer(PyObject *func, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "amqp_sansio._speedups: set_fallbacks() not called");
        return NULL;
    }
    return PyObject_Vectorcall(func, args, (size_t)nargs, kwnames);
}

/* Returned by decode() when the Python decoder must take over (no exception is set). */
#define BAIL ((PyObject *)1)

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* Decode the table whose u32 size is at data[offset]; the table must end by data[len].
 * Returns a new dict and sets *next, or BAIL, or NULL with an exception (memory). */
static PyObject *decode(const unsigned char *data, Py_ssize_t len, Py_ssize_t offset, int depth,
                        Py_ssize_t *next)
{
    if (depth > MAX_TABLE_DEPTH || offset < 0 || len - offset < 4) {
        return BAIL;
    }
    uint32_t size = be32(data + offset);
    Py_ssize_t pos = offset + 4;
    if ((uint64_t)size > (uint64_t)(len - pos)) {
        return BAIL;
    }
    Py_ssize_t end = pos + (Py_ssize_t)size;
    PyObject *table = PyDict_New();
    if (table == NULL) {
        return NULL;
    }
    Py_ssize_t entries = 0;
    while (pos < end) {
        if (++entries > MAX_TABLE_ENTRIES) {
            goto bail;
        }
        Py_ssize_t klen = data[pos];
        Py_ssize_t k = pos + 1;
        /* the key, then at least its type code */
        if (klen >= end - k) {
            goto bail;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)data + k, klen, NULL);
        if (key == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                goto fail;
            }
            PyErr_Clear(); /* surrogateescape keys: the Python decoder's business */
            goto bail;
        }
        pos = k + klen;
        unsigned char t = data[pos++];
        Py_ssize_t left = end - pos;
        const unsigned char *p = data + pos;
        PyObject *value = NULL;
        Py_ssize_t width;
        switch (t) {
        case 'S':
        case 'x': {
            if (left < 4 || (uint64_t)be32(p) > (uint64_t)(left - 4)) {
                Py_DECREF(key);
                goto bail;
            }
            Py_ssize_t n = (Py_ssize_t)be32(p);
            const char *s = (const char *)p + 4;
            if (t == 'S') {
                value = PyUnicode_DecodeUTF8(s, n, NULL);
                if (value == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear(); /* not UTF-8: the bytes, as the Python decoder does */
                    value = PyBytes_FromStringAndSize(s, n);
                }
            }
            else {
                value = PyBytes_FromStringAndSize(s, n);
            }
            width = 4 + n;
            break;
        }
        case 'F': {
            Py_ssize_t after;
            value = decode(data, end, pos, depth + 1, &after);
            if (value == BAIL) {
                Py_DECREF(key);
                goto bail;
            }
            width = after - pos;
            break;
        }
        case 'b':
            width = 1;
            if (left >= width) value = PyLong_FromLong((int8_t)p[0]);
            break;
        case 'B':
            width = 1;
            if (left >= width) value = PyLong_FromLong(p[0]);
            break;
        case 't':
            width = 1;
            if (left >= width) value = PyBool_FromLong(p[0] != 0);
            break;
        case 's':
        case 'U':
            width = 2;
            if (left >= width) value = PyLong_FromLong((int16_t)be16(p));
            break;
        case 'u':
            width = 2;
            if (left >= width) value = PyLong_FromLong(be16(p));
            break;
        case 'I':
            width = 4;
            if (left >= width) value = PyLong_FromLong((int32_t)be32(p));
            break;
        case 'i':
            width = 4;
            if (left >= width) value = PyLong_FromUnsignedLong(be32(p));
            break;
        case 'l':
        case 'L': /* both signed 64-bit, as RabbitMQ reads them */
            width = 8;
            if (left >= width) value = PyLong_FromLongLong((int64_t)be64(p));
            break;
        case 'f':
            width = 4;
            if (left >= width) {
                double x = PyFloat_Unpack4((const char *)p, 0);
                value = (x == -1.0 && PyErr_Occurred()) ? NULL : PyFloat_FromDouble(x);
            }
            break;
        case 'd':
            width = 8;
            if (left >= width) {
                double x = PyFloat_Unpack8((const char *)p, 0);
                value = (x == -1.0 && PyErr_Occurred()) ? NULL : PyFloat_FromDouble(x);
            }
            break;
        case 'V':
            width = 0;
            value = Py_NewRef(Py_None);
            break;
        default: /* A, T, D and unknown codes */
            Py_DECREF(key);
            goto bail;
        }
        if (left < width) { /* a fixed-width value runs past the table */
            Py_DECREF(key);
            goto bail;
        }
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        int failed = PyDict_SetItem(table, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (failed) {
            goto fail;
        }
        pos += width;
    }
    if (pos != end) {
        goto bail;
    }
    *next = end;
    return table;
bail:
    Py_DECREF(table);
    return BAIL;
fail:
    Py_DECREF(table);
    return NULL;
}

/* One field of a method's or properties' argument list, by its code (see Builder).
 * Returns a new reference and advances *pos, or BAIL, or NULL with an exception (memory). */
static PyObject *unpack_one(char code, const unsigned char *data, Py_ssize_t len, Py_ssize_t *pos)
{
    Py_ssize_t at = *pos;
    Py_ssize_t left = len - at;
    const unsigned char *p = data + at;
    PyObject *value;
    switch (code) {
    case 'o':
        if (left < 1) return BAIL;
        *pos = at + 1;
        return PyLong_FromLong(p[0]);
    case 'h':
        if (left < 2) return BAIL;
        *pos = at + 2;
        return PyLong_FromLong(be16(p));
    case 'l':
        if (left < 4) return BAIL;
        *pos = at + 4;
        return PyLong_FromUnsignedLong(be32(p));
    case 'q':
        if (left < 8) return BAIL;
        *pos = at + 8;
        return PyLong_FromUnsignedLongLong(be64(p));
    case 's': {
        if (left < 1 || p[0] > left - 1) return BAIL;
        value = PyUnicode_DecodeUTF8((const char *)p + 1, p[0], NULL);
        if (value == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
            PyErr_Clear(); /* Python raises the error */
            return BAIL;
        }
        *pos = at + 1 + p[0];
        return value;
    }
    case 'S': {
        if (left < 4 || (uint64_t)be32(p) > (uint64_t)(left - 4)) return BAIL;
        Py_ssize_t n = (Py_ssize_t)be32(p);
        *pos = at + 4 + n;
        return PyBytes_FromStringAndSize((const char *)p + 4, n);
    }
    case 'F':
        return decode(data, len, at, 0, pos);
    case 'R': { /* a field table kept as its octets, size included (decoded lazily) */
        if (left < 4 || (uint64_t)be32(p) > (uint64_t)(left - 4)) return BAIL;
        Py_ssize_t n = 4 + (Py_ssize_t)be32(p);
        *pos = at + n;
        return PyBytes_FromStringAndSize((const char *)p, n);
    }
    default:
        PyErr_Format(PyExc_ValueError, "unknown field code %c", code);
        return NULL;
    }
}

/* --- building instances -------------------------------------------------------------------- */

/* At most this many values per instance: properties have at most 15, methods at most 14. */
#define BUILDER_MAX 16

/* A callable that decodes one generated class: builder(buf, offset) returns (instance,
 * offset after the values), or None when the Python decoder must do it (not bytes, truncated,
 * not UTF-8, continuation or unknown property flags, a table C leaves to Python, ...). The
 * instance is made as object.__new__(cls) makes it and each value is stored into its slot, as
 * the generated Python decoder stores it; slots named in `nones` are set to None (a lazily
 * decoded table's decoded form).
 *
 * Codes: o octet, h short, l long, q longlong, b bit (consecutive bits share an octet, eight
 * to an octet), s shortstr, S longstr (bytes), F field table; properties (a flag word first,
 * None for each value whose flag is clear) have no bits and read R: a field table kept as its
 * octets, size prefix included. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    PyObject *codes_obj, *names, *nones; /* as given, for introspection */
    PyObject *fallback;                  /* called with (buf, offset) for what C can't do */
    int properties; /* 1: a flag word, then the values present */
    Py_ssize_t ncodes;
    char codes[BUILDER_MAX];
    Py_ssize_t offsets[BUILDER_MAX];
    Py_ssize_t nnones;
    Py_ssize_t none_offsets[BUILDER_MAX];
} Builder;

static inline void store(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    *(PyObject **)((char *)obj + offset) = value; /* a fresh instance: the slot is empty */
}

static PyObject *build(Builder *b, const unsigned char *data, Py_ssize_t len, Py_ssize_t pos)
{
    unsigned int flags = 0;
    if (b->properties) {
        if (len - pos < 2) Py_RETURN_NONE;
        flags = be16(data + pos);
        if (flags & ((1u << (16 - b->ncodes)) - 1)) Py_RETURN_NONE; /* continuation, unknown */
        pos += 2;
    }
    PyObject *obj = b->cls->tp_alloc(b->cls, 0);
    if (obj == NULL) {
        return NULL;
    }
    int bit = 8; /* the next bit of the current octet of packed bits; 8: read another octet */
    unsigned char bits = 0;
    for (Py_ssize_t i = 0; i < b->ncodes; i++) {
        char code = b->codes[i];
        PyObject *value;
        if (b->properties && !(flags & (0x8000u >> i))) {
            value = Py_NewRef(Py_None);
        }
        else if (code == 'b') {
            if (bit == 8) {
                if (pos >= len) goto bail;
                bits = data[pos++];
                bit = 0;
            }
            value = Py_NewRef((bits >> bit++) & 1 ? Py_True : Py_False);
        }
        else {
            bit = 8;
            value = unpack_one(code, data, len, &pos);
            if (value == BAIL) goto bail;
            if (value == NULL) goto fail;
        }
        store(obj, b->offsets[i], value);
    }
    for (Py_ssize_t i = 0; i < b->nnones; i++) {
        store(obj, b->none_offsets[i], Py_NewRef(Py_None));
    }
    PyObject *end = PyLong_FromSsize_t(pos);
    if (end == NULL) goto fail;
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(end);
        goto fail;
    }
    PyTuple_SET_ITEM(result, 0, obj);
    PyTuple_SET_ITEM(result, 1, end);
    return result;
bail: /* the slots stored so far are released with the instance; the others are empty */
    Py_DECREF(obj);
    Py_RETURN_NONE;
fail:
    Py_DECREF(obj);
    return NULL;
}

static PyObject *builder_call(PyObject *self, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames)
{
    Builder *b = (Builder *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 2 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "a builder takes (buf, offset)");
        return NULL;
    }
    PyObject *result = Py_None;
    /* memoryview, bytearray, an offset out of range: the Python decoder's business */
    if (PyBytes_CheckExact(args[0]) && PyLong_CheckExact(args[1])) {
        Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
        if (pos == -1 && PyErr_Occurred()) {
            PyErr_Clear();
        }
        else if (pos >= 0 && pos <= PyBytes_GET_SIZE(args[0])) {
            result = build(b, (const unsigned char *)PyBytes_AS_STRING(args[0]),
                           PyBytes_GET_SIZE(args[0]), pos);
            if (result != Py_None) {
                return result; /* built, or NULL with an exception (memory) */
            }
            Py_DECREF(result);
        }
    }
    if (b->fallback != Py_None) {
        return PyObject_Vectorcall(b->fallback, args, 2, NULL);
    }
    Py_RETURN_NONE;
}

/* The offset of the slot *name* of *cls* (a plain object slot of that very class), or -1 with
 * an exception. */
static Py_ssize_t slot_offset(PyTypeObject *cls, PyObject *name)
{
    PyObject *descr = PyDict_GetItemWithError(cls->tp_dict, name);
    if (descr == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_TypeError, "%s has no slot %R", cls->tp_name, name);
        }
        return -1;
    }
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type) ||
        ((PyDescrObject *)descr)->d_type != cls) {
        PyErr_Format(PyExc_TypeError, "%s.%U is not a slot of that class", cls->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != Py_T_OBJECT_EX || (member->flags & Py_READONLY) ||
        member->offset < (Py_ssize_t)sizeof(PyObject) ||
        member->offset > cls->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
        PyErr_Format(PyExc_TypeError, "%s.%U is not a writable object slot", cls->tp_name, name);
        return -1;
    }
    return member->offset;
}

static PyObject *builder_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"cls", "codes", "names", "nones", "properties", "fallback", NULL};
    PyObject *cls, *codes_obj, *names, *nones, *fallback = Py_None;
    int properties;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!SO!O!p|O:Builder", keywords, &PyType_Type,
                                     &cls, &codes_obj, &PyTuple_Type, &names, &PyTuple_Type,
                                     &nones, &properties, &fallback)) {
        return NULL;
    }
    if (!PyBytes_CheckExact(codes_obj)) {
        PyErr_SetString(PyExc_TypeError, "Builder: codes must be bytes");
        return NULL;
    }
    if (fallback != Py_None && !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "Builder: fallback must be callable or None");
        return NULL;
    }
    const char *codes = PyBytes_AS_STRING(codes_obj);
    Py_ssize_t ncodes = PyBytes_GET_SIZE(codes_obj);
    PyTypeObject *target = (PyTypeObject *)cls;
    if (ncodes < 1 || ncodes > (properties ? 15 : BUILDER_MAX) ||
        PyTuple_GET_SIZE(names) != ncodes || PyTuple_GET_SIZE(nones) > BUILDER_MAX) {
        PyErr_SetString(PyExc_ValueError, "Builder: one slot name per code, at most 16");
        return NULL;
    }
    /* The instances must be what object.__new__ makes: no __dict__, allocated by type. */
    if (target->tp_dictoffset != 0 || target->tp_alloc != PyType_GenericAlloc ||
        target->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "Builder: %s is not a plain slots class", target->tp_name);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ncodes; i++) {
        if (!strchr(properties ? "ohlqsSFR" : "bohlqsSF", codes[i])) {
            PyErr_Format(PyExc_ValueError, "Builder: unknown field code %c", codes[i]);
            return NULL;
        }
    }
    Builder *b = (Builder *)type->tp_alloc(type, 0); /* tracked by the GC once returned */
    if (b == NULL) {
        return NULL;
    }
    b->vectorcall = builder_call;
    b->cls = (PyTypeObject *)Py_NewRef(cls);
    b->codes_obj = Py_NewRef(codes_obj);
    b->names = Py_NewRef(names);
    b->nones = Py_NewRef(nones);
    b->fallback = Py_NewRef(fallback);
    b->properties = properties;
    b->ncodes = ncodes;
    memcpy(b->codes, codes, (size_t)ncodes);
    for (Py_ssize_t i = 0; i < ncodes; i++) {
        if ((b->offsets[i] = slot_offset(target, PyTuple_GET_ITEM(names, i))) < 0) goto fail;
    }
    b->nnones = PyTuple_GET_SIZE(nones);
    for (Py_ssize_t i = 0; i < b->nnones; i++) {
        if ((b->none_offsets[i] = slot_offset(target, PyTuple_GET_ITEM(nones, i))) < 0) goto fail;
    }
    /* Every slot set exactly once: a slot named twice would leak its first value. */
    for (Py_ssize_t i = 0; i < ncodes + b->nnones; i++) {
        for (Py_ssize_t j = 0; j < i; j++) {
            Py_ssize_t oi = i < ncodes ? b->offsets[i] : b->none_offsets[i - ncodes];
            Py_ssize_t oj = j < ncodes ? b->offsets[j] : b->none_offsets[j - ncodes];
            if (oi == oj) {
                PyErr_SetString(PyExc_ValueError, "Builder: a slot is named twice");
                goto fail;
            }
        }
    }
    return (PyObject *)b;
fail:
    Py_DECREF(b);
    return NULL;
}

static int builder_traverse(PyObject *self, visitproc visit, void *arg)
{
    Builder *b = (Builder *)self;
    Py_VISIT(b->cls);
    Py_VISIT(b->fallback); /* a classmethod of cls: a cycle through cls's dict */
    return 0;
}

static int builder_clear(PyObject *self)
{
    Builder *b = (Builder *)self;
    Py_CLEAR(b->cls);
    Py_CLEAR(b->codes_obj);
    Py_CLEAR(b->names);
    Py_CLEAR(b->nones);
    Py_CLEAR(b->fallback);
    return 0;
}

static void builder_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    builder_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyMemberDef builder_members[] = {
    {"cls", Py_T_OBJECT_EX, offsetof(Builder, cls), Py_READONLY, "the class built"},
    {"codes", Py_T_OBJECT_EX, offsetof(Builder, codes_obj), Py_READONLY, "one code per value"},
    {"names", Py_T_OBJECT_EX, offsetof(Builder, names), Py_READONLY, "the slot of each value"},
    {"nones", Py_T_OBJECT_EX, offsetof(Builder, nones), Py_READONLY, "slots set to None"},
    {"properties", Py_T_INT, offsetof(Builder, properties), Py_READONLY, "a flag word first"},
    {"fallback", Py_T_OBJECT_EX, offsetof(Builder, fallback), Py_READONLY,
     "what decodes what C can't (None: the builder returns None then)"},
    {NULL},
};

PyDoc_STRVAR(builder_doc,
             "Builder(cls, codes, names, nones, properties)\n--\n\n"
             "A decoder of the generated class cls: calling it with (buf, offset) returns\n"
             "(instance, offset after the values), or None when the generated Python decoder\n"
             "must do it. Each value of codes goes into the slot of cls named at its place in\n"
             "names; the slots in nones are set to None. With properties, a flag word comes\n"
             "first and a value whose flag is clear is None. Given a fallback, it returns\n"
             "fallback(buf, offset) instead of None.");

static PyTypeObject BuilderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "amqp_sansio._speedups.Builder",
    .tp_basicsize = sizeof(Builder),
    .tp_dealloc = builder_dealloc,
    .tp_traverse = builder_traverse,
    .tp_clear = builder_clear,
    .tp_members = builder_members,
    .tp_vectorcall_offset = offsetof(Builder, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = builder_doc,
    .tp_new = builder_new,
};

/* --- encoding ------------------------------------------------------------------------------ */

/* What the encoders return: done, or leave the whole table to Python (no exception set), or
 * fail with an exception (memory). */
#define ENCODED 0
#define TO_PYTHON 1
#define FAILED -1

typedef struct {
    unsigned char *data;
    Py_ssize_t len, cap;
} Out;

static int reserve(Out *o, Py_ssize_t n)
{
    if (n <= o->cap - o->len) {
        return ENCODED;
    }
    Py_ssize_t cap = o->cap ? o->cap : 256;
    while (cap - o->len < n) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return FAILED;
        }
        cap *= 2;
    }
    unsigned char *data = PyMem_Realloc(o->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    o->data = data;
    o->cap = cap;
    return ENCODED;
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A type octet, a u32 length n and the n octets of data: S and x values. */
static int put_sized(Out *o, unsigned char code, const char *data, Py_ssize_t n)
{
    if ((uint64_t)n > 0xFFFFFFFFu) {
        return TO_PYTHON; /* Python reports what does not fit a u32 */
    }
    if (reserve(o, 5 + n)) {
        return FAILED;
    }
    o->data[o->len] = code;
    put_be32(o->data + o->len + 1, (uint32_t)n);
    memcpy(o->data + o->len + 5, data, (size_t)n);
    o->len += 5 + n;
    return ENCODED;
}

/* Patch the u32 size of a container whose size field is at `at`, now that it is complete. */
static int close_container(Out *o, Py_ssize_t at)
{
    Py_ssize_t size = o->len - at - 4;
    if ((uint64_t)size > 0xFFFFFFFFu) {
        return TO_PYTHON;
    }
    put_be32(o->data + at, (uint32_t)size);
    return ENCODED;
}

static int encode_entries(Out *o, PyObject *table, int depth);

/* One type octet and value; depth is that of the enclosing container. Exact types only: a
 * subclass, a wrapper (Float32, LongString, ...), Decimal, datetime go to Python. */
static int encode_value(Out *o, PyObject *v, int depth)
{
    if (PyUnicode_CheckExact(v)) {
        if (PyUnicode_IS_ASCII(v)) {
            return put_sized(o, 'S', (const char *)PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v));
        }
        /* not AsUTF8AndSize: it would keep a UTF-8 copy in every non-ASCII string sent */
        PyObject *utf8 = PyUnicode_AsUTF8String(v);
        if (utf8 == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                return FAILED;
            }
            PyErr_Clear(); /* lone surrogates: Python says so */
            return TO_PYTHON;
        }
        int r = put_sized(o, 'S', PyBytes_AS_STRING(utf8), PyBytes_GET_SIZE(utf8));
        Py_DECREF(utf8);
        return r;
    }
    if (PyBool_Check(v)) {
        if (reserve(o, 2)) {
            return FAILED;
        }
        o->data[o->len++] = 't';
        o->data[o->len++] = v == Py_True;
        return ENCODED;
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            return TO_PYTHON; /* past int64 */
        }
        if (x == -1 && PyErr_Occurred()) {
            return FAILED;
        }
        if (reserve(o, 9)) {
            return FAILED;
        }
        unsigned char *p = o->data + o->len;
        uint64_t u = (uint64_t)x;
        /* the smallest signed type that holds it, as the Python encoder */
        if (x >= -0x80 && x <= 0x7F) {
            p[0] = 'b';
            p[1] = (unsigned char)u;
            o->len += 2;
        }
        else if (x >= -0x8000 && x <= 0x7FFF) {
            p[0] = 's';
            p[1] = (unsigned char)(u >> 8);
            p[2] = (unsigned char)u;
            o->len += 3;
        }
        else if (x >= -0x80000000LL && x <= 0x7FFFFFFFLL) {
            p[0] = 'I';
            put_be32(p + 1, (uint32_t)u);
            o->len += 5;
        }
        else {
            p[0] = 'l';
            put_be32(p + 1, (uint32_t)(u >> 32));
            put_be32(p + 5, (uint32_t)u);
            o->len += 9;
        }
        return ENCODED;
    }
    if (PyDict_CheckExact(v) || PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        if (reserve(o, 5)) {
            return FAILED;
        }
        int is_table = PyDict_CheckExact(v);
        o->data[o->len] = is_table ? 'F' : 'A';
        Py_ssize_t at = o->len + 1;
        o->len += 5;
        int r;
        if (is_table) {
            r = encode_entries(o, v, depth + 1);
        }
        else {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
            PyObject **items = PySequence_Fast_ITEMS(v);
            r = depth + 1 > MAX_TABLE_DEPTH || n > MAX_TABLE_ENTRIES ? TO_PYTHON : ENCODED;
            for (Py_ssize_t i = 0; i < n && r == ENCODED; i++) {
                r = encode_value(o, items[i], depth + 1);
            }
        }
        return r ? r : close_container(o, at);
    }
    if (v == Py_None) {
        if (reserve(o, 1)) {
            return FAILED;
        }
        o->data[o->len++] = 'V';
        return ENCODED;
    }
    if (PyFloat_CheckExact(v)) {
        if (reserve(o, 9)) {
            return FAILED;
        }
        o->data[o->len] = 'd';
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(v), (char *)o->data + o->len + 1, 0) < 0) {
            return FAILED;
        }
        o->len += 9;
        return ENCODED;
    }
    if (PyBytes_CheckExact(v)) {
        return put_sized(o, 'x', PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    }
    if (PyByteArray_CheckExact(v)) {
        return put_sized(o, 'x', PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
    }
    return TO_PYTHON;
}

/* The entries of a dict, each a short-string key and a value; nothing here runs Python code,
 * so the dict can't change while it is walked. */
static int encode_entries(Out *o, PyObject *table, int depth)
{
    if (depth > MAX_TABLE_DEPTH || PyDict_GET_SIZE(table) > MAX_TABLE_ENTRIES) {
        return TO_PYTHON; /* Python raises the error */
    }
    Py_ssize_t i = 0;
    PyObject *key, *value;
    while (PyDict_Next(table, &i, &key, &value)) {
        /* ASCII keys only: others may need surrogateescape, the Python encoder's business */
        if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key)) {
            return TO_PYTHON;
        }
        Py_ssize_t klen = PyUnicode_GET_LENGTH(key);
        if (klen > 255) {
            return TO_PYTHON;
        }
        if (reserve(o, 1 + klen)) {
            return FAILED;
        }
        o->data[o->len] = (unsigned char)klen;
        memcpy(o->data + o->len + 1, PyUnicode_DATA(key), (size_t)klen);
        o->len += 1 + klen;
        int r = encode_value(o, value, depth);
        if (r) {
            return r;
        }
    }
    return ENCODED;
}

PyDoc_STRVAR(encode_table_doc,
             "encode_table(out, table)\n--\n\n"
             "Append *table* to the bytearray *out* as a u32 size and its entries; None or {}\n"
             "is 4 zero octets. The pure-Python encode_table handles what this does not\n"
             "(see the module), and raises the errors.");

static PyObject *encode_table(PyObject *module, PyObject *const *args, Py_ssize_t nargsf,
                              PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs != 2 || !PyByteArray_CheckExact(args[0]) ||
        !(args[1] == Py_None || PyDict_CheckExact(args[1]))) {
        goto python;
    }
    PyObject *out = args[0], *table = args[1];
    Out o = {NULL, 0, 0};
    int r = reserve(&o, 4);
    if (r == ENCODED) {
        memset(o.data, 0, 4);
        o.len = 4;
        if (table != Py_None) {
            r = encode_entries(&o, table, 0);
        }
        if (r == ENCODED) {
            r = close_container(&o, 0);
        }
    }
    if (r == ENCODED) {
        Py_ssize_t start = PyByteArray_GET_SIZE(out);
        if (o.len > PY_SSIZE_T_MAX - start) {
            r = TO_PYTHON;
        }
        else if (PyByteArray_Resize(out, start + o.len) < 0) {
            r = FAILED; /* e.g. BufferError: the bytearray is exported */
        }
        else {
            memcpy(PyByteArray_AS_STRING(out) + start, o.data, (size_t)o.len);
        }
    }
    PyMem_Free(o.data);
    if (r == ENCODED) {
        Py_RETURN_NONE;
    }
    if (r == FAILED) {
        return NULL;
    }
python:
    return defer(encode_fallback, args, nargs, kwnames);
}

PyDoc_STRVAR(decode_table_doc,
             "decode_table(buf, offset, depth=0)\n--\n\n"
             "Decode the field table whose u32 size is at *offset*: (table, offset after it).\n"
             "The pure-Python decode_table handles what this does not (see the module).");

static PyObject *decode_table(PyObject *module, PyObject *const *args, Py_ssize_t nargsf,
                              PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL) { /* depth=...: rare, let Python bind the arguments */
        goto python;
    }
    if (nargs < 2 || nargs > 3) {
        PyErr_Format(PyExc_TypeError, "decode_table() takes 2 or 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    PyObject *buf = args[0];
    long depth = 0;
    if (nargs == 3) {
        depth = PyLong_AsLong(args[2]);
        if (depth == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto python;
        }
    }
    if (!PyBytes_CheckExact(buf) || !PyLong_CheckExact(args[1]) || depth < 0) {
        goto python;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
    if (offset == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto python;
    }
    Py_ssize_t next;
    PyObject *table = decode((const unsigned char *)PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf),
                             offset, (int)(depth > MAX_TABLE_DEPTH ? MAX_TABLE_DEPTH + 1 : depth),
                             &next);
    if (table == NULL) {
        return NULL;
    }
    if (table != BAIL) {
        PyObject *end = PyLong_FromSsize_t(next);
        if (end == NULL) {
            Py_DECREF(table);
            return NULL;
        }
        PyObject *result = PyTuple_Pack(2, table, end);
        Py_DECREF(table);
        Py_DECREF(end);
        return result;
    }
python:
    return defer(decode_fallback, args, nargs, kwnames);
}

static PyObject *set_fallbacks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyCallable_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_fallbacks(decode_table, encode_table): two callables");
        return NULL;
    }
    Py_XSETREF(decode_fallback, Py_NewRef(args[0]));
    Py_XSETREF(encode_fallback, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_table", (PyCFunction)(void (*)(void))decode_table, METH_FASTCALL | METH_KEYWORDS,
     decode_table_doc},
    {"set_fallbacks", (PyCFunction)(void (*)(void))set_fallbacks, METH_FASTCALL,
     "set_fallbacks(decode_table, encode_table): the pure-Python functions to defer to."},
    {"encode_table", (PyCFunction)(void (*)(void))encode_table, METH_FASTCALL | METH_KEYWORDS,
     encode_table_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "amqp_sansio._speedups",
    .m_doc = "Optional C accelerator for field-table decoding (see amqp_sansio._table).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyType_Ready(&BuilderType) < 0 ||
        PyModule_AddObjectRef(m, "Builder", (PyObject *)&BuilderType) < 0 ||
        PyModule_AddIntConstant(m, "VERSION", SPEEDUPS_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "MAX_TABLE_DEPTH", MAX_TABLE_DEPTH) < 0 ||
        PyModule_AddIntConstant(m, "MAX_TABLE_ENTRIES", MAX_TABLE_ENTRIES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
