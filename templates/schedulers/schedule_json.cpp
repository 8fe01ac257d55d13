// templates/schedule_json: see schedule_json.h.
#include "templates/schedulers/schedule_json.h"

namespace fusejit::templates {

using Json = nlohmann::ordered_json;

Json params_json(const ScheduleParams& params) {
  Json out = Json::object();
  for (const auto& [name, value] : param_fields(params)) {
    out[std::string(name)] = std::visit([](const auto& v) { return Json(v); }, value);
  }
  return out;
}

Json schedule_json(const Schedule& s) {
  Json refused = Json::array();
  for (const Verdict& v : s.refused) {
    refused.push_back({{"scheduler", v.scheduler}, {"reason", v.refusal.value_or("")}});
  }
  return Json{{"scheduler", s.scheduler->name()},
              {"params", params_json(s.params)},
              {"refused", std::move(refused)}};
}

}  // namespace fusejit::templates
