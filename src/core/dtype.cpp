#include "core/dtype.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace grimoire {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::F64: case DType::I64: return 8;
        case DType::F32: case DType::I32: return 4;
        case DType::F16: case DType::BF16: case DType::I16: return 2;
        case DType::F8_E4M3: case DType::F8_E5M2: case DType::I8: case DType::U8: case DType::BOOL: return 1;
    }
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::F64: return "F64";
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
        case DType::F8_E4M3: return "F8_E4M3";
        case DType::F8_E5M2: return "F8_E5M2";
        case DType::I64: return "I64";
        case DType::I32: return "I32";
        case DType::I16: return "I16";
        case DType::I8: return "I8";
        case DType::U8: return "U8";
        case DType::BOOL: return "BOOL";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
    static constexpr DType all[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8_E4M3, DType::F8_E5M2,
                                    DType::I64, DType::I32, DType::I16, DType::I8, DType::U8, DType::BOOL};
    for (DType t : all)
        if (dtype_name(t) == n) return t;
    return std::nullopt;
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
    return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000;
    const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return static_cast<uint16_t>(sign);
        man |= 0x800000;
        const int shift = 14 - exp;
        uint32_t half = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) ++half;
        return static_cast<uint16_t>(sign | half);
    }
    uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (man >> 13);
    const uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
    return static_cast<uint16_t>(half);
}

float fp8_e4m3_to_f32(uint8_t v) {
    const uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    if (exp == 0xf && man == 7) return NAN;
    float r = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                       : std::ldexp(static_cast<float>(man | 8), static_cast<int>(exp) - 10);
    return sign ? -r : r;
}

float fp8_e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }

uint8_t f32_to_fp8_e4m3(float f) {
    // Round to nearest even, saturating to +-448 like the device's __NV_SATFINITE conversion (NaN -> 0x7f). The
    // activation quantizer's oracle (kernels/cpu/quant_act.cpp) runs it on every element of a prompt, so it works
    // on the bits: tests/unit/test_dtype.cpp checks it against an exhaustive search of the 127 codes.
    if (std::isnan(f)) return 0x7f;
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return sign | 0x7e;
    if (a < 0.015625f)  // below 2^-6 the codes are subnormal, multiples of 2^-9 (8 * 2^-9 is code 0x08, 2^-6)
        return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // exact scaling; ties to even
    uint32_t u;
    std::memcpy(&u, &a, 4);
    uint32_t t = u >> 20;  // f32 exponent and the top 3 mantissa bits
    const uint32_t rem = u & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (t & 1u))) ++t;  // a carry moves into the exponent, as it should
    return sign | static_cast<uint8_t>((((t >> 3) - 120u) << 3) | (t & 7u));  // rebias 127 -> 7
}

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
    switch (t) {
        case DType::F32: std::memcpy(dst, src, n * 4); return;
        case DType::BF16: {
            auto p = static_cast<const uint16_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(p[i]);
            return;
        }
        case DType::F16: {
            auto p = static_cast<const uint16_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(p[i]);
            return;
        }
        case DType::F64: {
            auto p = static_cast<const double*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(p[i]);
            return;
        }
        case DType::F8_E4M3: {
            auto p = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3_to_f32(p[i]);
            return;
        }
        case DType::F8_E5M2: {
            auto p = static_cast<const uint8_t*>(src);
            for (size_t i = 0; i < n; ++i) dst[i] = fp8_e5m2_to_f32(p[i]);
            return;
        }
        case DType::I64: { auto p = static_cast<const int64_t*>(src); for (size_t i = 0; i < n; ++i) dst[i] = float(p[i]); return; }
        case DType::I32: { auto p = static_cast<const int32_t*>(src); for (size_t i = 0; i < n; ++i) dst[i] = float(p[i]); return; }
        case DType::I16: { auto p = static_cast<const int16_t*>(src); for (size_t i = 0; i < n; ++i) dst[i] = float(p[i]); return; }
        case DType::I8: { auto p = static_cast<const int8_t*>(src); for (size_t i = 0; i < n; ++i) dst[i] = float(p[i]); return; }
        case DType::U8: case DType::BOOL: { auto p = static_cast<const uint8_t*>(src); for (size_t i = 0; i < n; ++i) dst[i] = float(p[i]); return; }
    }
    GRIMOIRE_CHECK(false, "unknown dtype");
}

}  // namespace grimoire
