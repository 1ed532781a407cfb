// The CPU kernels' function multiversioning: with GCC on x86-64 a hot function marked GRIMOIRE_SIMD_CLONES is
// also compiled for x86-64-v3 (AVX2 + FMA) and the loader picks the clone the machine runs, so one binary
// vectorizes wide where it can and still runs on any x86-64.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GRIMOIRE_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GRIMOIRE_SIMD_CLONES
#endif
