/* Big-endian (network order) loads and stores on unaligned char pointers. */
#ifndef AMQWIRE_ENDIAN_H
#define AMQWIRE_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#  define AMQW_BSWAP16 __builtin_bswap16
#  define AMQW_BSWAP32 __builtin_bswap32
#  define AMQW_BSWAP64 __builtin_bswap64
#else
static inline uint16_t AMQW_BSWAP16(uint16_t v) { return (uint16_t)((v << 8) | (v >> 8)); }
static inline uint32_t AMQW_BSWAP32(uint32_t v) {
    return ((v & 0xffu) << 24) | ((v & 0xff00u) << 8) | ((v >> 8) & 0xff00u) | (v >> 24);
}
static inline uint64_t AMQW_BSWAP64(uint64_t v) {
    return ((uint64_t)AMQW_BSWAP32((uint32_t)v) << 32) | AMQW_BSWAP32((uint32_t)(v >> 32));
}
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#  define AMQW_BE16(v) (v)
#  define AMQW_BE32(v) (v)
#  define AMQW_BE64(v) (v)
#else
#  define AMQW_BE16(v) AMQW_BSWAP16(v)
#  define AMQW_BE32(v) AMQW_BSWAP32(v)
#  define AMQW_BE64(v) AMQW_BSWAP64(v)
#endif

static inline void amqw_pack_u16(char *p, uint16_t v) { v = AMQW_BE16(v); memcpy(p, &v, 2); }
static inline void amqw_pack_u32(char *p, uint32_t v) { v = AMQW_BE32(v); memcpy(p, &v, 4); }
static inline void amqw_pack_u64(char *p, uint64_t v) { v = AMQW_BE64(v); memcpy(p, &v, 8); }
static inline void amqw_pack_f32(char *p, float f) { uint32_t v; memcpy(&v, &f, 4); amqw_pack_u32(p, v); }
static inline void amqw_pack_f64(char *p, double d) { uint64_t v; memcpy(&v, &d, 8); amqw_pack_u64(p, v); }

static inline uint16_t amqw_unpack_u16(const char *p) { uint16_t v; memcpy(&v, p, 2); return AMQW_BE16(v); }
static inline uint32_t amqw_unpack_u32(const char *p) { uint32_t v; memcpy(&v, p, 4); return AMQW_BE32(v); }
static inline uint64_t amqw_unpack_u64(const char *p) { uint64_t v; memcpy(&v, p, 8); return AMQW_BE64(v); }
static inline float amqw_unpack_f32(const char *p) { uint32_t v = amqw_unpack_u32(p); float f; memcpy(&f, &v, 4); return f; }
static inline double amqw_unpack_f64(const char *p) { uint64_t v = amqw_unpack_u64(p); double d; memcpy(&d, &v, 8); return d; }

#endif
