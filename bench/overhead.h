// bench/overhead: fusejit_bench --overhead, the host time of recording and of cached evals on
// tiny tensors (see overhead.cpp).
#pragma once

#include <map>
#include <string>
#include <utility>

namespace fusejit::bench {

// name -> (eager, torch.compile): one line "name eager compile" each in the file that
// bench/torch_bench.py and bench/torch_overhead.py write (ms or us, as the script says).
using TorchFigures = std::map<std::string, std::pair<double, double>>;
TorchFigures read_torch(const std::string& path);

// Prints the table; `torch_file` (may be empty) holds bench/torch_overhead.py's figures.
int run_overhead(const std::string& torch_file);

}  // namespace fusejit::bench
