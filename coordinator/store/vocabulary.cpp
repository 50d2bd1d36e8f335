// The categorical vocabulary of a statistics round (schema version 7).
#include <algorithm>

#include "store_impl.hpp"

namespace starling::coordinator {
using namespace store_detail;

Status Store::Impl::prepareVocabularyStatements() {
  if (version < 7) return Status::ok();  // the table came with version 7
  STARLING_RETURN_IF_ERROR(
      prepare(&insertVocabulary,
              "INSERT INTO categorical_vocabulary (column_name, position, value, count) VALUES (?1, ?2, ?3, ?4)"));
  return prepare(&selectVocabulary,
                 "SELECT column_name, value, count FROM categorical_vocabulary ORDER BY column_name, position");
}

Status Store::saveCategoricalVocabulary(const std::vector<CategoricalColumnRecord>& columns) {
  Impl& d = *impl_;
  auto fail = [&](const Status& s) {
    return Status(s.code(), fmt::format("recording the categorical vocabulary in '{}': {}", d.path, s.message()));
  };
  if (Status w = d.writable(); !w) return fail(w);
  for (const auto& c : columns) {
    if (c.column.empty()) return fail(invalid("a column without a name"));
    if (c.values.size() != c.counts.size())
      return fail(
          invalid(fmt::format("column '{}': {} values and {} counts", c.column, c.values.size(), c.counts.size())));
    if (std::adjacent_find(c.values.begin(), c.values.end(), std::greater_equal<>()) != c.values.end())
      return fail(invalid(fmt::format("column '{}': the values are not sorted and distinct", c.column)));
  }
  sqlite::Transaction tx(*d.db);
  if (Status s = tx.begin(); !s) return fail(s);
  if (Status s = d.db->exec("DELETE FROM categorical_vocabulary"); !s) return fail(s);
  for (const auto& c : columns)
    for (std::size_t i = 0; i < c.values.size(); ++i) {
      d.insertVocabulary->bind(1, std::string_view(c.column))
          .bind(2, static_cast<int64_t>(i))
          .bind(3, std::string_view(c.values[i]))
          .bind(4, toSql(c.counts[i]));
      if (Status s = d.insertVocabulary->run(); !s) return fail(s);
    }
  if (Status s = tx.commit(); !s) return fail(s);
  return Status::ok();
}

Result<std::vector<CategoricalColumnRecord>> Store::categoricalVocabulary() {
  Impl& d = *impl_;
  std::vector<CategoricalColumnRecord> out;
  if (!d.selectVocabulary) return out;
  sqlite::Statement& s = *d.selectVocabulary;
  for (;;) {
    Result<bool> row = s.step();
    if (!row) return row.status().withContext(fmt::format("reading the categorical vocabulary from '{}'", d.path));
    if (!*row) break;
    std::string column = s.text(0);
    if (out.empty() || out.back().column != column) {
      out.emplace_back();
      out.back().column = std::move(column);
    }
    out.back().values.push_back(s.text(1));
    out.back().counts.push_back(fromSql(s.int64(2)));
  }
  s.reset();
  return out;
}

}  // namespace starling::coordinator
