#pragma once
// scheduler/sqlite.hpp: the little of SQLite the job store uses: a prepared statement that
// binds and reads typed values (NaN stored as NULL, empty texts and blobs never NULL), an
// immediate transaction rolled back unless committed, and an error naming the store.

#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "common/format.hpp"

namespace coach::scheduler::sqlite {

/// A prepared statement, finalized on destruction. Bind indices are 1-based, columns 0-based.
class statement {
 public:
  statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~statement() { sqlite3_finalize(stmt_); }
  statement(const statement&) = delete;
  statement& operator=(const statement&) = delete;

  bool ok() const { return rc_ == SQLITE_OK || rc_ == SQLITE_ROW || rc_ == SQLITE_DONE; }
  statement& bind(int i, std::int64_t v) {
    if (ok()) rc_ = sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  statement& bind(int i, int v) { return bind(i, std::int64_t(v)); }
  statement& bind(int i, std::uint64_t v) { return bind(i, std::int64_t(v)); }
  /// NaN and infinities are stored as NULL (SQLite turns NaN into NULL anyway).
  statement& bind(int i, double v) {
    if (ok())
      rc_ = std::isfinite(v) ? sqlite3_bind_double(stmt_, i, v) : sqlite3_bind_null(stmt_, i);
    return *this;
  }
  statement& bind(int i, std::optional<double> v) { return v ? bind(i, *v) : bind_null(i); }
  statement& bind(int i, std::string_view v) {
    // An empty view may have a null data(), which SQLite would store as NULL, not "".
    if (ok())
      rc_ = sqlite3_bind_text(stmt_, i, v.empty() ? "" : v.data(), int(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  statement& bind_blob(int i, const void* data, std::size_t bytes) {
    // A zero-length blob with a null pointer would be stored as NULL.
    static const char empty = 0;
    if (ok()) rc_ = sqlite3_bind_blob64(stmt_, i, bytes ? data : &empty, bytes, SQLITE_TRANSIENT);
    return *this;
  }
  statement& bind_null(int i) {
    if (ok()) rc_ = sqlite3_bind_null(stmt_, i);
    return *this;
  }
  /// SQLITE_ROW, SQLITE_DONE, or an error code.
  int step() {
    if (!ok()) return rc_;
    rc_ = sqlite3_step(stmt_);
    return rc_;
  }
  std::int64_t integer(int c) const { return sqlite3_column_int64(stmt_, c); }
  double real(int c) const {
    return sqlite3_column_type(stmt_, c) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN()
                                                        : sqlite3_column_double(stmt_, c);
  }
  std::optional<double> optional_real(int c) const {
    if (sqlite3_column_type(stmt_, c) == SQLITE_NULL) return std::nullopt;
    return sqlite3_column_double(stmt_, c);
  }
  std::span<const std::byte> blob(int c) const {
    const auto* p = static_cast<const std::byte*>(sqlite3_column_blob(stmt_, c));
    return {p, p ? std::size_t(sqlite3_column_bytes(stmt_, c)) : 0};
  }
  std::string text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, c));
    return p ? std::string(p, std::size_t(sqlite3_column_bytes(stmt_, c))) : std::string();
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

/// BEGIN IMMEDIATE ... COMMIT, rolled back unless commit() succeeds.
class sql_transaction {
 public:
  explicit sql_transaction(sqlite3* db) : db_(db) {
    ok_ = sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~sql_transaction() {
    if (ok_ && !done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  bool ok() const { return ok_; }
  bool commit() {
    done_ = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK;
    return done_;
  }

 private:
  sqlite3* db_;
  bool ok_ = false;
  bool done_ = false;
};

inline std::unexpected<error> sql_error(sqlite3* db, const std::string& path,
                                        std::string_view what) {
  return std::unexpected<error>(
      error{errc::io_error, coach::format("job store '{}': {}: {}", path, what,
                                          db ? sqlite3_errmsg(db) : "out of memory")});
}

}  // namespace coach::scheduler::sqlite
