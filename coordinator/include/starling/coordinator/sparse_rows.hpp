#pragma once
// Sparse models at the coordinator (issue 22; docs/sparse.md): a client that offers the
// rows its data touches (Hello.row_set) trains the compact model of those rows, so
// what the coordinator sends it and reads from it is over a model::RowView of the
// global model. The daemon (Federation) and the simulator both go through here.
//
// Pure functions; any thread.

#include <cstdint>
#include <memory>
#include <string>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/coordinator/client_rows.hpp"
#include "starling/coordinator/task.hpp"
#include "starling/model/model.hpp"
#include "starling/model/row_view.hpp"
#include "starling/wire/messages.hpp"

namespace starling::coordinator {

// The rows a Hello offers under `model` (the task's, shared by every client's): the row
// set is read as buckets of hello.rowBucket rows over the model's inputs, and the view
// covers every row of those buckets. nullptr when the Hello offers none.
// kInvalidArgument when the model has no first-layer rows; kMalformed naming what is
// wrong with the row set.
Result<std::shared_ptr<const ClientRowSet>> offeredRows(const wire::HelloMsg& hello,
                                                        std::shared_ptr<const model::Model> model);

// Why the task does not take a client's row set ("" when it does): train.sparse-rows
// off, a categorical vocabulary (it re-codes the features), or centred feature scaling
// (it makes every feature non-zero), or distributed noise (a share on part of the
// coordinates would leave the others short of noise).
std::string sparseRowsRefusal(const TaskConfig& task, bool hasVocabulary, bool centredScaling, bool distributedNoise);

// An Update's tensor as the engine takes it (over the dim parameters of the global
// model): decoded over the view's size when the client trains a view (else over dim),
// then placed at the view's full positions as a sparse tensor (a dense, sign or QSGD
// tensor over the view becomes one value per view parameter). kMalformed as
// compression::decode says.
Status decodeUpdate(const compression::PayloadView& payload, const model::RowView* view, uint32_t dim,
                    compression::Compressed& out);

}  // namespace starling::coordinator
