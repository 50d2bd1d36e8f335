// The profile's JSON (profile.hpp): written with fmt, read by a small strict reader of
// the one shape it has (an object of numbers, strings, booleans and one array of
// objects), so that a damaged file is refused with its line and what is wrong.

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <variant>

#include "starling/client/profile.hpp"
#include "starling/util/text_cursor.hpp"

namespace starling::client {

namespace {

constexpr const char* kFormat = "starling-profile";
constexpr int kVersion = 2;  // 2: load_seconds

// ---- reading -------------------------------------------------------------------

struct Value;
using Object = std::vector<std::pair<std::string, Value>>;
using Array = std::vector<Value>;

struct Value {
  int line = 0;
  std::variant<double, bool, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> v;
};

class Reader : public TextCursor {
 public:
  Reader(const std::string& text, const std::string& origin) : TextCursor(text), origin_(origin) {}

  Result<Value> document() {
    auto v = value(0);
    if (!v) return v;
    skipSpace();
    if (pos_ != text_.size()) return error("text after the profile's object");
    return v;
  }

  Status error(const std::string& what, int line = 0) const {
    return Status(StatusCode::kMalformed, fmt::format("{}:{}: {}", origin_, line > 0 ? line : line_, what));
  }

 private:
  std::string near() const {
    return pos_ < text_.size() ? fmt::format("'{}'", text_[pos_]) : std::string("the end of the file");
  }

  Result<std::string> string() {
    if (!take('"')) return error("expected a string, found " + near());
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\n') return error("a string runs past the end of its line");
      if (c == '\\') {
        if (pos_ >= text_.size()) break;
        c = text_[pos_++];
        if (c == 'n')
          c = '\n';
        else if (c == 't')
          c = '\t';
        else if (c != '"' && c != '\\' && c != '/')
          return error(fmt::format("unsupported escape '\\{}'", c));
      }
      out.push_back(c);
    }
    if (pos_ >= text_.size()) return error("a string is not closed");
    ++pos_;
    return out;
  }

  Result<Value> value(int depth) {
    if (depth > 8) return error("nested too deeply");
    skipSpace();
    Value v;
    v.line = line_;
    if (pos_ >= text_.size()) return error("expected a value, found the end of the file");
    const char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      auto obj = std::make_shared<Object>();
      if (!take('}')) {
        int end = line_;  // where the last member ended: a missing ',' is reported there
        do {
          auto key = string();
          if (!key) return key.status();
          if (!take(':')) return error("expected ':' after \"" + *key + "\", found " + near());
          auto item = value(depth + 1);
          if (!item) return item;
          end = line_;
          obj->emplace_back(std::move(*key), std::move(*item));
        } while (take(','));
        if (!take('}')) return error("expected ',' or '}' in an object, found " + near(), end);
      }
      v.v = obj;
    } else if (c == '[') {
      ++pos_;
      auto arr = std::make_shared<Array>();
      if (!take(']')) {
        int end = line_;
        do {
          auto item = value(depth + 1);
          if (!item) return item;
          end = line_;
          arr->push_back(std::move(*item));
        } while (take(','));
        if (!take(']')) return error("expected ',' or ']' in an array, found " + near(), end);
      }
      v.v = arr;
    } else if (c == '"') {
      auto str = string();
      if (!str) return str.status();
      v.v = std::move(*str);
    } else if (text_.substr(pos_, 4) == "true" || text_.substr(pos_, 5) == "false") {
      const bool t = text_[pos_] == 't';
      pos_ += t ? 4 : 5;
      v.v = t;
    } else {
      const char* begin = text_.data() + pos_;  // (a std::string's: terminated)
      char* end = nullptr;
      const double d = std::strtod(begin, &end);
      if (end == begin) return error("expected a value, found " + near());
      if (!std::isfinite(d)) return error("a number that is not finite");
      pos_ += static_cast<std::size_t>(end - begin);
      v.v = d;
    }
    return v;
  }

  std::string origin_;
};

// The members of one object, each taken once by name; what is left over is an error.
class Fields {
 public:
  Fields(const Object& o, const Reader& reader, std::string where) : reader_(reader), where_(std::move(where)) {
    for (const auto& [k, v] : o) {
      if (!fields_.emplace(k, &v).second) {
        duplicate_ = &v;
        duplicateKey_ = k;
      }
      lines_.emplace(k, v.line);
    }
  }
  int line(const char* key) const {
    auto it = lines_.find(key);
    return it == lines_.end() ? 0 : it->second;
  }

  Status number(const char* key, double& out, double least = 0) {
    auto v = take(key);
    if (!v) return v.status();
    const double* d = std::get_if<double>(&(*v)->v);
    if (!d) return reader_.error(fmt::format("\"{}\" must be a number", key), (*v)->line);
    if (*d < least) return reader_.error(fmt::format("\"{}\" is {}, below {}", key, *d, least), (*v)->line);
    out = *d;
    return Status::ok();
  }
  template <class T>
  Status integer(const char* key, T& out, double least = 0) {
    double d = 0;
    STARLING_RETURN_IF_ERROR(number(key, d, least));
    if (d != std::floor(d) || d > 1e15)
      return reader_.error(fmt::format("\"{}\" must be a whole number, not {}", key, d), line(key));
    out = static_cast<T>(d);
    return Status::ok();
  }
  Status text(const char* key, std::string& out) {
    auto v = take(key);
    if (!v) return v.status();
    const std::string* s = std::get_if<std::string>(&(*v)->v);
    if (!s) return reader_.error(fmt::format("\"{}\" must be a string", key), (*v)->line);
    out = *s;
    return Status::ok();
  }
  Status flag(const char* key, bool& out) {
    auto v = take(key);
    if (!v) return v.status();
    const bool* b = std::get_if<bool>(&(*v)->v);
    if (!b) return reader_.error(fmt::format("\"{}\" must be true or false", key), (*v)->line);
    out = *b;
    return Status::ok();
  }
  Result<const Value*> take(const char* key) {
    auto it = fields_.find(key);
    if (it == fields_.end() || it->second == nullptr)
      return reader_.error(fmt::format("{} has no \"{}\"", where_, key));
    const Value* v = it->second;
    it->second = nullptr;
    return v;
  }
  Status done() const {
    if (duplicate_ != nullptr)
      return reader_.error(fmt::format("\"{}\" given twice in {}", duplicateKey_, where_), duplicate_->line);
    for (const auto& [k, v] : fields_)
      if (v != nullptr) return reader_.error(fmt::format("unknown key \"{}\" in {}", k, where_), v->line);
    return Status::ok();
  }

 private:
  const Reader& reader_;
  std::string where_;
  std::map<std::string, const Value*> fields_;
  std::map<std::string, int> lines_;
  const Value* duplicate_ = nullptr;
  std::string duplicateKey_;
};

}  // namespace

std::string profileToJson(const DeviceProfile& p) {
  const ProfileTask& t = p.task;
  std::string steps;
  for (const StepTime& s : p.steps)
    steps += fmt::format("{}\n    {{\"batch\": {}, \"step_seconds\": {:.9g}}}", steps.empty() ? "" : ",", s.batch,
                         s.stepSeconds);
  auto b = [](bool v) { return v ? "true" : "false"; };
  return fmt::format(
      "{{\n  \"format\": \"{}\",\n  \"version\": {},\n  \"model\": \"{}\",\n  \"params\": {},\n"
      "  \"uplink\": \"{}\",\n  \"uplink_density\": {:.9g},\n  \"uplink_ternary\": {},\n"
      "  \"downlink\": \"{}\",\n  \"downlink_density\": {:.9g},\n  \"downlink_ternary\": {},\n"
      "  \"fp16_values\": {},\n  \"error_feedback\": {},\n  \"repeats\": {},\n  \"steps\": [{}\n  ],\n"
      "  \"run_overhead_seconds\": {:.9g},\n  \"compress_seconds\": {:.9g},\n  \"encode_seconds\": {:.9g},\n"
      "  \"decode_seconds\": {:.9g},\n  \"update_bytes\": {},\n  \"broadcast_bytes\": {},\n"
      "  \"broadcast_compress_seconds\": {:.9g},\n  \"catch_up_seconds\": {:.9g},\n"
      "  \"eval_seconds_per_example\": {:.9g},\n  \"load_seconds\": {:.9g}\n}}\n",
      kFormat, kVersion, t.model, p.params, t.uplink, t.uplinkDensity, b(t.uplinkTernary), t.downlink,
      t.downlinkDensity, b(t.downlinkTernary), b(t.fp16Values), b(t.errorFeedback), p.repeats, steps,
      p.runOverheadSeconds, p.compressSeconds, p.encodeSeconds, p.decodeSeconds, p.updateBytes, p.broadcastBytes,
      p.broadcastCompressSeconds, p.catchUpSeconds, p.evalSecondsPerExample, p.loadSeconds);
}

Result<DeviceProfile> profileFromJson(const std::string& text, const std::string& origin) {
  Reader reader(text, origin);
  auto doc = reader.document();
  if (!doc) return doc.status();
  const auto* top = std::get_if<std::shared_ptr<Object>>(&doc->v);
  if (!top) return reader.error("a profile is a JSON object", doc->line);
  Fields f(**top, reader, "the profile");
  DeviceProfile p;
  ProfileTask& t = p.task;
  std::string format;
  int version = 0;
  STARLING_RETURN_IF_ERROR(f.text("format", format));
  if (format != kFormat)
    return reader.error(fmt::format("\"format\" is \"{}\", not \"{}\"", format, kFormat), f.line("format"));
  STARLING_RETURN_IF_ERROR(f.integer("version", version));
  if (version != kVersion)
    return reader.error(fmt::format("profile version {}; this build reads version {}", version, kVersion),
                        f.line("version"));
  STARLING_RETURN_IF_ERROR(f.text("model", t.model));
  STARLING_RETURN_IF_ERROR(f.integer("params", p.params, 1));
  STARLING_RETURN_IF_ERROR(f.text("uplink", t.uplink));
  STARLING_RETURN_IF_ERROR(f.number("uplink_density", t.uplinkDensity));
  STARLING_RETURN_IF_ERROR(f.flag("uplink_ternary", t.uplinkTernary));
  STARLING_RETURN_IF_ERROR(f.text("downlink", t.downlink));
  STARLING_RETURN_IF_ERROR(f.number("downlink_density", t.downlinkDensity));
  STARLING_RETURN_IF_ERROR(f.flag("downlink_ternary", t.downlinkTernary));
  STARLING_RETURN_IF_ERROR(f.flag("fp16_values", t.fp16Values));
  STARLING_RETURN_IF_ERROR(f.flag("error_feedback", t.errorFeedback));
  STARLING_RETURN_IF_ERROR(f.integer("repeats", p.repeats, 1));
  auto steps = f.take("steps");
  if (!steps) return steps.status();
  const auto* arr = std::get_if<std::shared_ptr<Array>>(&(*steps)->v);
  if (!arr || (*arr)->empty())
    return reader.error("\"steps\" must be a non-empty array of {\"batch\", \"step_seconds\"}", (*steps)->line);
  for (const Value& item : **arr) {
    const auto* obj = std::get_if<std::shared_ptr<Object>>(&item.v);
    if (!obj) return reader.error("each of \"steps\" must be an object", item.line);
    Fields s(**obj, reader, fmt::format("the step time at line {}", item.line));
    StepTime st;
    STARLING_RETURN_IF_ERROR(s.integer("batch", st.batch, 1));
    STARLING_RETURN_IF_ERROR(s.number("step_seconds", st.stepSeconds));
    STARLING_RETURN_IF_ERROR(s.done());
    if (!p.steps.empty() && st.batch <= p.steps.back().batch)
      return reader.error("\"steps\" must list increasing batch sizes", item.line);
    p.steps.push_back(st);
  }
  STARLING_RETURN_IF_ERROR(f.number("run_overhead_seconds", p.runOverheadSeconds));
  STARLING_RETURN_IF_ERROR(f.number("compress_seconds", p.compressSeconds));
  STARLING_RETURN_IF_ERROR(f.number("encode_seconds", p.encodeSeconds));
  STARLING_RETURN_IF_ERROR(f.number("decode_seconds", p.decodeSeconds));
  STARLING_RETURN_IF_ERROR(f.integer("update_bytes", p.updateBytes, 1));
  STARLING_RETURN_IF_ERROR(f.integer("broadcast_bytes", p.broadcastBytes, 1));
  STARLING_RETURN_IF_ERROR(f.number("broadcast_compress_seconds", p.broadcastCompressSeconds));
  STARLING_RETURN_IF_ERROR(f.number("catch_up_seconds", p.catchUpSeconds));
  STARLING_RETURN_IF_ERROR(f.number("eval_seconds_per_example", p.evalSecondsPerExample));
  STARLING_RETURN_IF_ERROR(f.number("load_seconds", p.loadSeconds));
  STARLING_RETURN_IF_ERROR(f.done());
  return p;
}

Status writeProfile(const DeviceProfile& profile, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << profileToJson(profile);
  out.close();
  if (!out) return Status(StatusCode::kIo, "cannot write the profile to " + path);
  return Status::ok();
}

Result<DeviceProfile> readProfile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kNotFound, path + ": cannot open the profile");
  std::stringstream text;
  text << in.rdbuf();
  return profileFromJson(text.str(), path);
}

}  // namespace starling::client
