#include "shard/balance.h"
