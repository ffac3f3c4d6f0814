// Devices a tensor's bytes can live on (DESIGN.md seam 3).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kvad {

/// The kinds of device the op layer knows. Each has at most one row of the op
/// table (tensor/backend.h), filled by its backend library.
enum class DeviceType : uint8_t {
  CPU = 0,   ///< host memory, the CPU kernels (kernels/cpu)
  CUDA = 1,  ///< an NVIDIA GPU's memory, the CUDA kernels (kernels/cuda)
  Sim = 2,   ///< host memory that only the op table touches; every host transfer counted (kernels/cpu)
};
inline constexpr int kDeviceTypes = 3;

/// A device: its type and, for CUDA, the ordinal ("cuda:1").
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device sim() { return {DeviceType::Sim, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  /// "cpu", "sim", "cuda" (ordinal 0) or "cuda:N".
  std::string str() const;
  /// Parses the names str() prints (and "cuda:0"). Throws kvad::Error naming
  /// the text and the known devices otherwise.
  static Device parse(std::string_view s);
  bool operator==(const Device&) const = default;
};

}  // namespace kvad
