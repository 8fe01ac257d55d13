// fusion/order_writes: the order in which in-place writes happen.
//
// An update_slice writes its value into its destination's buffer (an input), in place. The
// trace is functional: every other node that reads the destination reads the values from before
// the write. The partitioner runs regions in node order where nothing else decides it, so this
// pass puts every other reader of a destination (through views) before the update that writes
// it, moving nothing else.
#pragma once

#include "ir/graph.h"

namespace fusejit::fusion {

// `g` with each update_slice after every other node that reads its destination (directly or
// through views), otherwise in its order; `g` itself when that already holds. Inputs keep their
// order. Throws fusejit::UsageError when the writes cannot be ordered: a node needs the
// destination both before and after the write (it reads the buffer and, through other nodes,
// the update's result), or two updates write one buffer.
ir::Graph order_writes(ir::Graph g);

}  // namespace fusejit::fusion
