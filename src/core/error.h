// Error handling in three tiers (house rule 12):
//  (a) GRIMOIRE_CHECK: an invariant of our own code broke; abort with file:line and the expression.
//  (b) grimoire::Error: a load / config / input failure with context (file, tensor, key); thrown by loaders
//      and caught at the API boundary (CLI main, server start-up), which prints it and exits non-zero.
//  (c) request errors in src/server map to HTTP statuses; they are built on Error with a kind.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace grimoire {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "grimoire: internal check failed: %s at %s:%d %s\n", expr, file, line, msg.c_str());
    std::abort();
}

}  // namespace grimoire

#define GRIMOIRE_CHECK(cond, ...)                                                                  \
    do {                                                                                           \
        if (!(cond)) ::grimoire::check_failed(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
    } while (0)
