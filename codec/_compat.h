/* CPython API that differs across versions. */
#ifndef AMQWIRE_COMPAT_H
#define AMQWIRE_COMPAT_H
#include <Python.h>

/* A dict sized for n entries up front saves its resizes; the call is private API, so
   fall back to a plain dict where it is not exported. */
#if PY_VERSION_HEX < 0x030D0000 && !defined(PYPY_VERSION)
#  define amqw_dict_presized(n) _PyDict_NewPresized(n)
#else
#  define amqw_dict_presized(n) PyDict_New()
#endif

#endif
