// Where tests find real models: $KVAD_HOME/models/NAME.gguf, else
// ~/.cache/kvad/models/NAME.gguf (scripts/setup puts them there).
#pragma once
#include <string>

namespace kvad::test {
/// Path of a store model, or "" when it is not installed.
std::string find_model(const std::string& name);
/// $KVAD_HOME, else ~/.cache/kvad (where setup puts the store and hf-cache).
std::string kvad_home();
}
