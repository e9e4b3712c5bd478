//! Tool results and schemas as the host hands them to the model.
