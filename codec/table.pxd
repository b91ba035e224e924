from amqwire.codec.buffer cimport WriteBuffer, ReadView

cdef int write_table(WriteBuffer buf, object table, int depth) except -1
cdef int write_array(WriteBuffer buf, object seq, int depth) except -1
cdef int write_named_table(WriteBuffer buf, object table, const char *name) except -1
cdef dict read_table(ReadView *v, int depth)
cdef list read_array(ReadView *v, int depth)
cdef dict read_named_table(ReadView *v, const char *name)
cdef object name_error(object exc, str name)
