// kvad::Error: the one exception type library code throws (DESIGN.md, "Errors").
// Messages carry their context: the file, the field or key, the offset.
#pragma once
#include <stdexcept>
#include <string>

namespace kvad {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace kvad
