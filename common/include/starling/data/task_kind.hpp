#pragma once
// What a task learns: classes (softmax cross-entropy over numClasses outputs), a binary
// outcome (logistic loss on one output), or real values (squared error or Huber on one
// output). The data's labels are checked against it (data/loaders.hpp) and the model's
// loss follows from it (model/model.hpp).

#include <optional>
#include <string>
#include <string_view>

namespace starling::data {

enum class TaskKind { kClassification, kBinary, kRegression };

inline std::string_view taskKindName(TaskKind k) {
  switch (k) {
    case TaskKind::kBinary:
      return "binary";
    case TaskKind::kRegression:
      return "regression";
    case TaskKind::kClassification:
      break;
  }
  return "classification";
}

// "classification", "binary" or "regression"; nullopt for anything else.
inline std::optional<TaskKind> parseTaskKind(std::string_view name) {
  if (name == "classification") return TaskKind::kClassification;
  if (name == "binary") return TaskKind::kBinary;
  if (name == "regression") return TaskKind::kRegression;
  return std::nullopt;
}

}  // namespace starling::data
