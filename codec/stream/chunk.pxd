# Osiris chunks (what a stream-protocol Deliver carries), for Cython modules that cimport
# them (the Spark stream source reads records straight from a chunk).

from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef enum:
    CHUNK_HEADER_SIZE = 48


cdef struct ChunkHeader:
    uint8_t version
    uint8_t chunk_type
    uint16_t num_entries
    uint32_t num_records
    int64_t timestamp
    uint64_t epoch
    uint64_t first_offset
    uint32_t crc
    uint32_t data_size
    uint32_t trailer_size
    uint8_t filter_size


cdef class Chunk:
    cdef ChunkHeader header
    cdef readonly object data       # the buffer the chunk was read from (held, not copied)


# Reads and checks the header of the chunk in data[0:size] (obj: the object that holds
# it, for the CRC32 of its entries).
cdef int read_header(object obj, const char *data, Py_ssize_t size, ChunkHeader *h, bint check_crc) except -1

# The records of a checked chunk from from_offset on, appended to out: (offset, bytes)
# pairs (mode 0), bytes (mode 1), or amqp10 Messages (mode 2).  Returns the offset of the
# first record appended (with none, the offset after the chunk).
cdef uint64_t append_records(const char *data, ChunkHeader *h, uint64_t from_offset, int mode,
                             list out) except? 0


# The records of one chunk one at a time, in C, with no Python object per record (the
# Spark stream source builds Arrow columns straight from them).  start() reads and checks
# the header (and CRC32); each next() points at the following record's bytes (a
# compressed sub-entry is inflated into a buffer the reader holds until the next one) and
# sets ``offset`` to that record's offset; it returns 0 after the last record (at once
# for a tracking chunk), having checked the entries' bounds and their record count.
cdef class RecordReader:
    cdef ChunkHeader header
    cdef readonly uint64_t offset       # the offset of the record next() gave last
    cdef object _owner                  # holds the chunk's buffer
    cdef const char *_entries
    cdef Py_ssize_t _pos                # the next entry's position in the entries
    cdef uint32_t _entry                # entries begun
    cdef uint64_t _next                 # the offset of the next record
    cdef const char *_sub               # the records of the current sub-entry
    cdef Py_ssize_t _sub_size
    cdef Py_ssize_t _sub_pos
    cdef Py_ssize_t _sub_at             # where the sub-entry starts in the chunk (errors)
    cdef uint16_t _sub_count
    cdef uint16_t _sub_index
    cdef bytes _inflated
    cdef bint _started

    cdef int start(self, object owner, const char *data, Py_ssize_t size, bint check_crc) except -1
    cdef int next(self, const char **record, Py_ssize_t *size) except -1
