// templates/device_sources: the device helper files (templates/device/*.cuh and ir/fj_random.cuh),
// embedded into the library at build time (embed_device.cmake), and pasted into generated kernels.
#pragma once

#include <string_view>
#include <vector>

namespace fusejit::templates {

struct DeviceFile {
  std::string_view name;  // "fj_core.cuh"
  std::string_view text;  // the file's contents
};

// Every embedded file, in the order listed in templates/CMakeLists.txt.
const std::vector<DeviceFile>& device_files();

// The file of that name; throws fusejit::InternalError when there is none.
std::string_view device_source(std::string_view name);

}  // namespace fusejit::templates
