// templates/schedule_json: a region's schedule (registry.h) as a JSON object, built with
// nlohmann-json (`fusejit plan --json`). Only the files that build such documents include this
// header.
#pragma once

#include <nlohmann/json.hpp>

#include "templates/schedulers/registry.h"

namespace fusejit::templates {

// {"field": value, ...}: the parameters' fields in declaration order (counts as numbers,
// switches as booleans, counts per sweep as arrays).
nlohmann::ordered_json params_json(const ScheduleParams& params);

// {"scheduler": name, "params": params_json, "refused": [{"scheduler", "reason"}, ...]}: the
// refusals of the schedulers asked before the one that took the region, in order.
nlohmann::ordered_json schedule_json(const Schedule& s);

}  // namespace fusejit::templates
