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
