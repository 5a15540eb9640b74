#include "worker/line_reader.hpp"

#include <cstring>
#include <utility>

namespace coach::worker::detail {

result<bool> line_reader::next(std::span<char>& line) {
  for (;;) {
    const void* nl = scan_ < end_ ? std::memchr(buf_.data() + scan_, '\n', end_ - scan_) : nullptr;
    if (nl != nullptr || (eof_ && begin_ < end_)) {
      take_line(nl, line);
      return true;
    }
    if (eof_) return false;
    if (auto ok = refill(); !ok) return std::unexpected(std::move(ok.error()));
  }
}

void line_reader::take_line(const void* nl, std::span<char>& line) {
  const std::size_t stop =
      nl != nullptr ? std::size_t(static_cast<const char*>(nl) - buf_.data()) : end_;
  line = std::span<char>(buf_.data() + begin_, stop - begin_);
  begin_ = scan_ = nl != nullptr ? stop + 1 : end_;
  if (++line_no_ == 1 && line.size() >= 3 && std::memcmp(line.data(), "\xEF\xBB\xBF", 3) == 0) {
    line = line.subspan(3);
  }
}

result<void> line_reader::refill() {
  // Keep the unfinished line, at the front; grow only for a line longer than the buffer.
  scan_ = end_;
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    scan_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) {
    if (buf_.size() >= max_line) {
      return fail(errc::parse_error, "{}: line {} is longer than {} bytes; is it a CSV file?",
                  in_.path(), line_no_ + 1, max_line);
    }
    buf_.resize(buf_.size() * 2);
  }
  auto got = in_.read(buf_.data() + end_, buf_.size() - end_);
  if (!got) return std::unexpected(std::move(got.error()));
  if (*got < buf_.size() - end_) eof_ = true;
  end_ += *got;
  return {};
}

}  // namespace coach::worker::detail
