// Where the bundled demo model lives when no --model is given (`grimoire run` and `grimoire serve`).
#pragma once
#include <string>

namespace grimoire::cli {

// models/demo found relative to the executable (build/<preset>/grimoire -> ../../models/demo, an installed
// bin/grimoire -> ../share/grimoire/models/demo), then in the source tree the binary was built from. Throws
// Error listing the places searched when none holds a config.json.
std::string default_model_dir();

}  // namespace grimoire::cli
