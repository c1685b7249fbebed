#!/bin/bash
# GPT-3 175B shape (Brown et al. 2020, table 2.1) on 16 nodes: 8-way tensor x 16-way pipeline parallelism.
# The node count below is for a single node while the script is tried out, so the launch is too small
# for the model-parallel layout (a real run sets NODES=16).

NODES=1
PER_NODE=8
VOCAB=$3
MERGES=$4
DATA=$5

LAUNCH="--nproc_per_node $PER_NODE --nnodes $NODES --node_rank 0 --master_addr localhost --master_port 29500"

torchrun $LAUNCH pretrain_gpt.py \
    --num-layers 96 --hidden-size 12288 --num-attention-heads 96 \
    --seq-length 2048 --max-position-embeddings 2048 \
    --attention-backend auto \
    --micro-batch-size 1 --global-batch-size 1536 \
    --train-iters 500000 --lr 6.0e-5 --min-lr 6.0e-6 --lr-decay-style cosine \
    --lr-warmup-fraction .001 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 \
    --clip-grad 1.0 --fp16 \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \
    --vocab-file "$VOCAB" --merge-file "$MERGES" --data-path "$DATA" --split 949,50,1 \
    --log-interval 100 --eval-interval 1000 --eval-iters 10
