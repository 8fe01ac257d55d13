// templates/cluster: the exchange of a row's partials between the blocks of a thread-block
// cluster, in kernel IR; see reduction.h (ClusterPartial) and device/fj_cluster.cuh.
#include <fmt/format.h>

#include "templates/schedulers/reduction.h"

namespace fusejit::templates {

void add_cluster_exchange(kir::Block& decl, kir::Block& out,
                          const std::vector<ClusterPartial>& partials, int64_t blocks,
                          const kir::ExprP& phase) {
  kir::Block& publish = out.branch(kir::infix(kir::thread_index(), "==", kir::lit(0)));
  std::vector<kir::ExprP> slots;
  for (const ClusterPartial& p : partials) {
    const std::string type = fmt::format("__shared__ {}", p.type);
    const kir::ExprP slot = phase ? kir::subscript(decl.array(type, p.slot, 2), phase)
                                  : decl.let_mut(type, p.slot);
    publish.assign(slot, p.value);
    slots.push_back(slot);
  }
  // Release of the slots, acquire of every block's: the barrier orders the publication before
  // the remote reads (fj_cluster.cuh).
  out.eval(kir::sync_cluster());
  for (size_t i = 0; i < partials.size(); ++i) {
    out.assign(partials[i].value,
               kir::call(fmt::format("fj_cluster_fold<{}>", blocks),
                         {kir::prefix("&", slots[i]), kir::call(partials[i].functor, {})}));
  }
}

}  // namespace fusejit::templates
