/* Optional C decoder for AMQP field tables: the same results as amqp_sansio._table's
 * pure-Python decode_table, several times faster. unpack_fields and unpack_properties do the
 * same for the arguments of generated methods and content properties, and encode_table for
 * encoding tables of the common types, under the same rule.
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
#include <stdint.h>
#include <string.h>

/* Must match amqp_sansio._table: MAX_TABLE_DEPTH and MAX_TABLE_ENTRIES (checked at import). */
#define MAX_TABLE_DEPTH 32
#define MAX_TABLE_ENTRIES 65536
/* The interface amqp_sansio._table expects (_SPEEDUPS_VERSION): a build from other sources
 * is not used. 2: unpack_fields and unpack_properties; 3: encode_table; 4: set_fallbacks. */
#define SPEEDUPS_VERSION 4

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

/* One field of a method's or properties' argument list, by its code (see unpack_fields).
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

/* Parse (codes, buf, offset) of unpack_fields/unpack_properties. 0: go on; 1: return None. */
static int unpack_args(PyObject *const *args, Py_ssize_t nargs, const char *name,
                       const char **codes, Py_ssize_t *ncodes, const unsigned char **data,
                       Py_ssize_t *len, Py_ssize_t *offset)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes 3 arguments (%zd given)", name, nargs);
        return -1;
    }
    if (!PyBytes_CheckExact(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): codes must be bytes", name);
        return -1;
    }
    if (!PyBytes_CheckExact(args[1]) || !PyLong_CheckExact(args[2])) {
        return 1; /* memoryview, bytearray, ...: the Python decoder's business */
    }
    *offset = PyLong_AsSsize_t(args[2]);
    if (*offset == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 1;
    }
    *codes = PyBytes_AS_STRING(args[0]);
    *ncodes = PyBytes_GET_SIZE(args[0]);
    *data = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    *len = PyBytes_GET_SIZE(args[1]);
    return *offset < 0 || *offset > *len;
}

/* The values and the offset after them, as a tuple of ncodes + 1 items; steals nothing. */
static PyObject *finish(PyObject *values, Py_ssize_t ncodes, Py_ssize_t pos)
{
    PyObject *end = PyLong_FromSsize_t(pos);
    if (end == NULL) {
        Py_DECREF(values);
        return NULL;
    }
    PyTuple_SET_ITEM(values, ncodes, end);
    return values;
}

PyDoc_STRVAR(unpack_fields_doc,
             "unpack_fields(codes, buf, offset)\n--\n\n"
             "A method's arguments, one per code, and the offset after them; None when the\n"
             "generated Python decoder must do it (not bytes, truncated, not UTF-8, ...).\n"
             "Codes: o octet, h short, l long, q longlong, b bit (consecutive bits share\n"
             "an octet, eight to an octet), s shortstr, S longstr (bytes), F field table.");

static PyObject *unpack_fields(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const char *codes;
    const unsigned char *data;
    Py_ssize_t ncodes, len, pos;
    int skip = unpack_args(args, nargs, "unpack_fields", &codes, &ncodes, &data, &len, &pos);
    if (skip) {
        return skip < 0 ? NULL : Py_NewRef(Py_None);
    }
    PyObject *values = PyTuple_New(ncodes + 1);
    if (values == NULL) {
        return NULL;
    }
    int bit = 8; /* the next bit of the current octet of packed bits; 8: read another octet */
    unsigned char bits = 0;
    for (Py_ssize_t i = 0; i < ncodes; i++) {
        PyObject *value;
        if (codes[i] == 'b') {
            if (bit == 8) {
                if (pos >= len) goto bail;
                bits = data[pos++];
                bit = 0;
            }
            value = Py_NewRef((bits >> bit++) & 1 ? Py_True : Py_False);
        }
        else {
            bit = 8;
            value = unpack_one(codes[i], data, len, &pos);
            if (value == BAIL) goto bail;
            if (value == NULL) goto fail;
        }
        PyTuple_SET_ITEM(values, i, value);
    }
    return finish(values, ncodes, pos);
bail:
    Py_DECREF(values);
    Py_RETURN_NONE;
fail:
    Py_DECREF(values);
    return NULL;
}

PyDoc_STRVAR(unpack_properties_doc,
             "unpack_properties(codes, buf, offset)\n--\n\n"
             "Content properties after their flag word, one value per code (None when the flag\n"
             "is clear), and the offset after them; None when the generated Python decoder\n"
             "must do it (continuation or unknown flags, truncated, not UTF-8, ...).\n"
             "Codes as for unpack_fields but b, plus R: a field table kept as its octets, size\n"
             "prefix included.");

static PyObject *unpack_properties(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    const char *codes;
    const unsigned char *data;
    Py_ssize_t ncodes, len, pos;
    int skip = unpack_args(args, nargs, "unpack_properties", &codes, &ncodes, &data, &len, &pos);
    if (skip) {
        return skip < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (ncodes > 15) {
        PyErr_SetString(PyExc_ValueError, "unpack_properties(): at most 15 properties");
        return NULL;
    }
    if (len - pos < 2) {
        Py_RETURN_NONE;
    }
    unsigned int flags = be16(data + pos);
    /* bit 0 is continuation; bits below the last property are unknown flags */
    if (flags & ((1u << (16 - ncodes)) - 1)) {
        Py_RETURN_NONE;
    }
    pos += 2;
    PyObject *values = PyTuple_New(ncodes + 1);
    if (values == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ncodes; i++) {
        PyObject *value;
        if (!(flags & (0x8000u >> i))) {
            value = Py_NewRef(Py_None);
        }
        else {
            value = unpack_one(codes[i], data, len, &pos);
            if (value == BAIL) {
                Py_DECREF(values);
                Py_RETURN_NONE;
            }
            if (value == NULL) {
                Py_DECREF(values);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(values, i, value);
    }
    return finish(values, ncodes, pos);
}

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
    {"unpack_fields", (PyCFunction)(void (*)(void))unpack_fields, METH_FASTCALL,
     unpack_fields_doc},
    {"unpack_properties", (PyCFunction)(void (*)(void))unpack_properties, METH_FASTCALL,
     unpack_properties_doc},
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
    if (PyModule_AddIntConstant(m, "VERSION", SPEEDUPS_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "MAX_TABLE_DEPTH", MAX_TABLE_DEPTH) < 0 ||
        PyModule_AddIntConstant(m, "MAX_TABLE_ENTRIES", MAX_TABLE_ENTRIES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
