#pragma once
// "key=value" lines: the text form of configs inside model files. Strict: unknown, missing,
// repeated or malformed keys throw linattn::Error naming the key and the value seen.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace linattn::model::detail {

class KeyValues {
 public:
  // what: the name used in error messages, e.g. "model config".
  KeyValues(std::string_view text, std::string what);
  KeyValues() = default;

  int64_t get_int(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  double get_double(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  // Whether the text has the key: for the keys only some files write (an encoder's classes).
  bool has(const std::string& key) const { return values_.count(key) > 0; }

  void set(const std::string& key, const std::string& value);
  void set(const std::string& key, int64_t value) { set(key, std::to_string(value)); }
  void set(const std::string& key, uint64_t value) { set(key, std::to_string(value)); }
  void set_double(const std::string& key, double value);
  std::string text() const;
  // Throws naming the first key no get_* asked for (after reading every expected key).
  void check_all_read() const;

 private:
  std::string what_;
  std::map<std::string, std::string> values_;
  mutable std::map<std::string, bool> read_;
};

// One field of a struct S and its key: a table of these writes and reads the struct, so that the two
// directions cannot drift apart.
template <class S>
struct Field {
  const char* key;
  std::variant<int64_t S::*, uint64_t S::*, double S::*, std::string S::*> member;
};

template <class S>
void write_fields(KeyValues& kv, const S& s, std::span<const Field<S>> fields) {
  for (const Field<S>& f : fields) {
    std::visit(
        [&](auto member) {
          using M = std::remove_cvref_t<decltype(s.*member)>;
          if constexpr (std::is_same_v<M, double>)
            kv.set_double(f.key, s.*member);
          else
            kv.set(f.key, s.*member);
        },
        f.member);
  }
}

template <class S>
void read_fields(const KeyValues& kv, S& s, std::span<const Field<S>> fields) {
  for (const Field<S>& f : fields) {
    std::visit(
        [&](auto member) {
          using M = std::remove_cvref_t<decltype(s.*member)>;
          if constexpr (std::is_same_v<M, int64_t>)
            s.*member = kv.get_int(f.key);
          else if constexpr (std::is_same_v<M, uint64_t>)
            s.*member = kv.get_u64(f.key);
          else if constexpr (std::is_same_v<M, double>)
            s.*member = kv.get_double(f.key);
          else
            s.*member = kv.get_string(f.key);
        },
        f.member);
  }
}

}  // namespace linattn::model::detail
