// ir/text: the trace text format (docs/trace-format.md is its grammar). print() and parse()
// round-trip exactly: print(parse(print(g))) == print(g).
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fusejit::ir {

inline constexpr int kTraceFormatVersion = 1;

std::string print(const Graph& g);
// One node as a line of the trace (without the newline): "%4 : f32[64,256] = add %3, %2".
std::string node_line(const Graph& g, NodeId id);

// Parses a trace; throws fusejit::Error whose message starts with "<source>:<line>:<column>: "
// when the text is malformed or a node is ill-formed.
Graph parse(std::string_view text, std::string_view source = "<trace>");

// Reads and parses a trace file; throws fusejit::Error naming the path when it cannot be read.
Graph parse_file(const std::string& path);

}  // namespace fusejit::ir
