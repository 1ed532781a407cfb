// Element types as safetensors names them, and the conversions the CPU oracle needs.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace grimoire {

enum class DType : uint8_t { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL };

// Bytes per element (every supported dtype is byte-aligned).
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even, NaN stays NaN (as torch does).
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// OCP FP8 formats: E4M3 (bias 7, no inf, 0x7f/0xff NaN, max 448) and E5M2 (bias 15, IEEE-like).
float fp8_e4m3_to_f32(uint8_t v);
float fp8_e5m2_to_f32(uint8_t v);
uint8_t f32_to_fp8_e4m3(float f);

// Converts n elements of type t at src into fp32 (for BF16, F16, F32, F64, FP8, integer types).
void convert_to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace grimoire
