#include "server/queue.h"

namespace grimoire::server {

void Task::push_token(TokenEvent ev) {
    {
        std::lock_guard lk(mu_);
        tokens_.push_back(std::move(ev));
    }
    cv_.notify_all();
}

void Task::finish(FinishEvent ev) {
    {
        std::lock_guard lk(mu_);
        if (!fin_ && !fin_taken_) fin_ = std::move(ev);
    }
    cv_.notify_all();
}

bool Task::wait(std::vector<TokenEvent>& tokens, std::optional<FinishEvent>& fin, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, timeout, [&] { return !tokens_.empty() || fin_.has_value(); });
    const bool any = !tokens_.empty() || fin_.has_value();
    for (auto& t : tokens_) tokens.push_back(std::move(t));
    tokens_.clear();
    if (fin_) {
        fin = std::move(fin_);
        fin_.reset();
        fin_taken_ = true;
    }
    return any;
}

bool TaskQueue::submit(std::shared_ptr<Task> t) {
    {
        std::lock_guard lk(mu_);
        if (closed_) return false;
        active_.push_back(t);
        q_.push_back(std::move(t));
    }
    cv_.notify_one();
    return true;
}

std::shared_ptr<Task> TaskQueue::pop() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !q_.empty() || closed_; });
    if (q_.empty()) return nullptr;
    auto t = std::move(q_.front());
    q_.pop_front();
    return t;
}

void TaskQueue::close() {
    {
        std::lock_guard lk(mu_);
        closed_ = true;
        for (auto& t : q_) t->cancel();
    }
    cv_.notify_all();
}

void TaskQueue::release(const Task* t) {
    std::lock_guard lk(mu_);
    std::erase_if(active_, [t](const std::shared_ptr<Task>& a) { return a.get() == t; });
}

size_t TaskQueue::in_flight() const {
    std::lock_guard lk(mu_);
    return active_.size();
}

void TaskQueue::cancel_all() {
    std::lock_guard lk(mu_);
    for (auto& t : active_) t->cancel();
}

size_t TaskQueue::depth() const {
    std::lock_guard lk(mu_);
    return q_.size();
}

}  // namespace grimoire::server
