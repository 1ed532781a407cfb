// Helpers shared by the unit tests: where ../shared and the fixtures are.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace grimoire::test {

// ../shared beside the checkout (CI has it). Tests that need it FAIL when it is missing, unless
// GRIMOIRE_ALLOW_NO_SHARED=1 is set for a local run.
inline std::string shared_dir() {
    if (const char* e = std::getenv("GRIMOIRE_SHARED")) return e;
    return std::string(GRIMOIRE_SOURCE_DIR) + "/../shared";
}
inline std::string fixtures_dir() { return std::string(GRIMOIRE_SOURCE_DIR) + "/tests/fixtures"; }
inline std::string source_dir() { return GRIMOIRE_SOURCE_DIR; }

}  // namespace grimoire::test
