// A test fixture with a fresh file store of its own (comm/file_store.h) in a temporary directory
// named after the test, removed afterwards: the store the recovery tests run their members on.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "comm/store.h"

namespace ntp::elastic {

class FileStoreTestBase : public ::testing::Test {
 protected:
  explicit FileStoreTestBase(std::string name) : name_(std::move(name)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ntp-" + name_ + "-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Result<std::shared_ptr<comm::Store>> store = comm::open_store("file:" + dir_.string(), "run");
    ASSERT_TRUE(store.ok()) << store.status().message();
    store_ = *store;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string name_;
  std::filesystem::path dir_;
  std::shared_ptr<comm::Store> store_;
};

}  // namespace ntp::elastic
