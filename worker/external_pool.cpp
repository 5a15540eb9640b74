// worker/external_pool.cpp: the processes of one job's script (external_pool.hpp).
#include "worker/external_pool.hpp"

#include <signal.h>

#include <algorithm>
#include <filesystem>

#include "common/format.hpp"
#include "common/log.hpp"

namespace coach::worker {

external_pool::external_pool(script_options opt) : opt_(std::move(opt)) {}

external_pool::~external_pool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    // Those still starting are killed: their handshakes end at once.
    for (pid_t pid : starting_pids_) ::kill(pid, SIGKILL);
  }
  changed_.notify_all();
  // The threads take the lock to end: joined without it.
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mutex_);
    threads.swap(threads_);
  }
  for (auto& t : threads)
    if (t.joinable()) t.join();
  // The rest end side by side.
  std::lock_guard lock(mutex_);
  if (first_) kept_.push_back(std::move(first_));
  for (auto& p : kept_) p->request_stop();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (auto& p : kept_) p->finish_stop(until);
}

result<std::unique_ptr<external_process>> external_pool::start_one(std::string who) {
  auto p = external_process::start(opt_, std::move(who));
  if (!p) return std::unexpected(p.error());
  const pid_t pid = (*p)->pid();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return fail(errc::cancelled, "the job's processes are stopping");
    starting_pids_.insert(pid);
  }
  auto ok = (*p)->handshake(&layout_, nullptr);
  {
    std::lock_guard lock(mutex_);
    starting_pids_.erase(pid);
  }
  if (!ok) return std::unexpected(ok.error());
  return std::move(*p);
}

result<void> external_pool::register_first() {
  auto p = external_process::start(opt_, "first process");
  if (!p) return std::unexpected(p.error());
  std::vector<float> values;
  auto layout = (*p)->handshake(nullptr, &values);
  if (!layout) return std::unexpected(layout.error());
  std::lock_guard lock(mutex_);
  layout_ = std::move(*layout);
  initial_ = std::make_shared<const std::vector<float>>(std::move(values));
  first_ = std::move(*p);
  ++started_;
  return {};
}

void external_pool::register_known(external_layout layout,
                                   std::shared_ptr<const std::vector<float>> initial) {
  std::lock_guard lock(mutex_);
  layout_ = std::move(layout);
  initial_ = std::move(initial);
}

result<std::unique_ptr<external_process>> external_pool::take_for_evaluation(std::string who) {
  std::unique_lock lock(mutex_);
  if (!first_) {
    lock.unlock();
    return take(std::move(who));
  }
  auto p = std::move(first_);
  p->rename(std::move(who));
  return p;
}

result<std::unique_ptr<external_process>> external_pool::take(std::string who) {
  std::unique_lock lock(mutex_);
  if (first_ && layout_.test_samples == 0) {  // no evaluator will ask for it
    auto p = std::move(first_);
    p->rename(std::move(who));
    return p;
  }
  if (promised_ > 0) --promised_;  // a prestarted process's taker came
  // One being started is nearer to ready than one not started yet.
  changed_.wait(lock, [&] { return !kept_.empty() || starting_ == 0 || stopping_; });
  if (!kept_.empty()) {
    auto p = std::move(kept_.front());
    kept_.erase(kept_.begin());
    top_up(lock);
    p->rename(std::move(who));
    return p;
  }
  ++started_;
  lock.unlock();
  auto p = start_one(std::move(who));
  lock.lock();
  top_up(lock);
  return p;
}

void external_pool::keep_warm(std::size_t n) {
  std::unique_lock lock(mutex_);
  warm_target_ = n;
  top_up(lock);
}

std::size_t external_pool::warm() const {
  std::lock_guard lock(mutex_);
  return kept_.size();
}

void external_pool::prestart(std::size_t n) {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < n && !stopping_; ++i) start_in_background();
  promised_ += n;
}

void external_pool::top_up(std::unique_lock<std::mutex>&) {
  // The warm ones come on top of those started for takers already announced (prestart): a
  // join early in the job finds one ready too.
  while (!stopping_ && kept_.size() + starting_ < warm_target_ + promised_) start_in_background();
}

void external_pool::in_background(std::function<void()> fn) {
  // Those that ended are joined now: a long job in function mode starts thousands.
  std::erase_if(threads_, [&](std::thread& t) {
    if (std::find(finished_.begin(), finished_.end(), t.get_id()) == finished_.end()) return false;
    t.join();  // it ended its work under the lock this thread holds: only its return is left
    return true;
  });
  finished_.clear();
  threads_.emplace_back([this, fn = std::move(fn)] {
    fn();
    std::lock_guard lock(mutex_);
    finished_.push_back(std::this_thread::get_id());
  });
}

void external_pool::start_in_background() {
  ++starting_;
  const auto who = coach::format("warm process {}", ++started_);
  in_background([this, who] {
    auto p = start_one(who);
    std::lock_guard lock(mutex_);
    --starting_;
    if (!p) {
      if (!stopping_) log::warn("{}", p.error().message);
    } else if (stopping_) {
      (*p)->stop(std::chrono::seconds(2));
    } else {
      kept_.push_back(std::move(*p));
    }
    changed_.notify_all();
  });
}

void external_pool::retire(std::unique_ptr<external_process> p) {
  p->request_stop();
  std::lock_guard lock(mutex_);
  if (stopping_) {  // the destructor waits for nothing more: ended here
    p->finish_stop(std::chrono::steady_clock::now() + std::chrono::seconds(2));
    return;
  }
  in_background([p = std::shared_ptr<external_process>(std::move(p))] {
    p->finish_stop(std::chrono::steady_clock::now() + std::chrono::seconds(10));
  });
}

result<std::shared_ptr<const external_model>> start_script_model(script_options opt) {
  auto pool = std::make_shared<external_pool>(std::move(opt));
  if (auto ok = pool->register_first(); !ok) return std::unexpected(ok.error());
  auto model = std::make_shared<external_model>();
  model->layout = pool->layout();
  model->initial = pool->initial();
  model->pool = std::move(pool);
  return std::shared_ptr<const external_model>(std::move(model));
}

result<script_options> script_options_for(const script_config& script, std::uint64_t seed,
                                          std::uint64_t job, std::string python, int threads) {
  std::error_code ec;
  const auto st = std::filesystem::status(script.path, ec);
  if (st.type() == std::filesystem::file_type::not_found)
    return fail(errc::not_found, "model.script: no file {}", script.path);
  if (st.type() == std::filesystem::file_type::directory)
    return fail(errc::invalid_argument, "model.script: {} is a directory, not a script",
                script.path);
  auto package = find_python_package();
  if (!package) return std::unexpected(package.error());
  script_options o;
  o.python = python.empty() ? default_python() : std::move(python);
  o.script = script.path;
  o.args = script.args;
  o.package_dir = std::move(*package);
  o.seed = seed;
  o.job = job;
  o.start_timeout_s = script.start_timeout_s;
  o.threads = threads;
  return o;
}

}  // namespace coach::worker
