"""The datasets page's plausible wrong answers: each must fail every hidden test of its question."""

STREAM = '''
def stats_update(state, chunk):
    {update}


def stats_finish(state):
    {finish}
'''
KEEP_CHUNKS = "return (state or []) + [chunk]"  # the whole stream kept in the state

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "the mean of the per-batch shares (small batches weigh as much as large ones)": '''
def padding_share(batches, pad_id=0):
    shares = [float((ids == pad_id).float().mean()) for ids in batches]
    return sum(shares) / len(shares)
''',
        "counts padding as token id 0 whatever pad_id says": '''
def padding_share(batches, pad_id=0):
    padded = sum(int((ids == 0).sum()) for ids in batches)
    return padded / sum(ids.numel() for ids in batches)
''',
    },
    "q2": {
        "forgets to scale the uint8 pixels to [0, 1]": '''
def standardize(images, mean, std):
    mean = torch.as_tensor(mean, dtype=torch.float32)[:, None, None]
    std = torch.as_tensor(std, dtype=torch.float32)[:, None, None]
    return (images.float() - mean) / std
''',
        "broadcasts the statistics over the width, not the channels": '''
def standardize(images, mean, std):
    mean = torch.as_tensor(mean, dtype=torch.float32)
    std = torch.as_tensor(std, dtype=torch.float32)
    return ((images.float() / 255).transpose(1, -1) - mean).transpose(1, -1) / std
''',
    },
    "q3": {
        "keeps every chunk, then torch.cat and torch's mean and std": STREAM.format(
            update=KEEP_CHUNKS, finish='''x = torch.cat(state).double() / 255
    return x.mean(dim=(0, 2, 3)), x.transpose(0, 1).reshape(3, -1).std(dim=1, unbiased=False)'''),
        "two passes: the mean first, then the squared deviations from it": STREAM.format(
            update=KEEP_CHUNKS, finish='''pixels = sum(c.shape[0] * c.shape[2] * c.shape[3] for c in state)
    mean = sum(c.double().sum(dim=(0, 2, 3)) for c in state) / 255 / pixels
    deviations = sum(((c.double() / 255 - mean[:, None, None]) ** 2).sum(dim=(0, 2, 3)) for c in state)
    return mean, (deviations / pixels).sqrt()'''),
        "the mean of per-image stds (the folklore CIFAR-10 std)": STREAM.format(
            update='''x = chunk.double() / 255
    images, sums, stds = state or (0, torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    return (images + x.shape[0], sums + x.mean(dim=(2, 3)).sum(0), stds + x.std(dim=(2, 3), unbiased=False).sum(0))''',
            finish="images, sums, stds = state\n    return sums / images, stds / images"),
        "the mean of the per-chunk statistics (unequal chunks weigh alike)": STREAM.format(
            update='''x = (chunk.double() / 255).transpose(0, 1).reshape(3, -1)
    chunks, means, stds = state or (0, torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    return chunks + 1, means + x.mean(dim=1), stds + x.std(dim=1, unbiased=False)''',
            finish="chunks, means, stds = state\n    return means / chunks, stds / chunks"),
        "sums in float32": STREAM.format(
            update='''x = chunk.float() / 255
    pixels, sums, squares = state or (0, torch.zeros(3), torch.zeros(3))
    return pixels + x.shape[0] * x.shape[2] * x.shape[3], sums + x.sum(dim=(0, 2, 3)), squares + (x ** 2).sum(dim=(0, 2, 3))''',
            finish='''pixels, sums, squares = state
    mean = sums / pixels
    return mean.double(), (squares / pixels - mean ** 2).clamp(min=0).sqrt().double()'''),
        "the sample std (divides by n - 1)": STREAM.format(
            update='''x = chunk.double() / 255
    pixels, sums, squares = state or (0, torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))
    return pixels + x.shape[0] * x.shape[2] * x.shape[3], sums + x.sum(dim=(0, 2, 3)), squares + (x ** 2).sum(dim=(0, 2, 3))''',
            finish='''pixels, sums, squares = state
    mean = sums / pixels
    return mean, ((squares - pixels * mean ** 2) / (pixels - 1)).clamp(min=0).sqrt()'''),
        "keeps the chunks in a module-level list; the state is only their count": '''
_CHUNKS = []


def stats_update(state, chunk):
    if state is None:
        _CHUNKS.clear()
    _CHUNKS.append(chunk)
    return (len(_CHUNKS),)


def stats_finish(state):
    x = torch.cat(_CHUNKS).double() / 255
    return x.mean(dim=(0, 2, 3)), x.transpose(0, 1).reshape(3, -1).std(dim=1, unbiased=False)
''',
        "keeps every pixel in a numpy array inside the state": STREAM.format(
            update='''import numpy as np
    return (chunk.numpy() if state is None else np.concatenate([state[0], chunk.numpy()]),)''',
            finish='''x = torch.from_numpy(state[0]).double() / 255
    return x.mean(dim=(0, 2, 3)), x.transpose(0, 1).reshape(3, -1).std(dim=1, unbiased=False)'''),
    },
    "q4": {
        "the mean of the per-image stds": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return image_stds.double().mean(dim=0)
''',
        "the root of the mean per-image variance (leaves out the spread between images)": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return (image_stds.double() ** 2).mean(dim=0).sqrt()
''',
        "adds the stds, not the variances": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return image_stds.double().mean(dim=0) + image_means.double().std(dim=0, unbiased=False)
''',
        "every image weighs alike, whatever its size": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return ((image_stds.double() ** 2).mean(dim=0) + image_means.double().var(dim=0, unbiased=False)).sqrt()
''',
        "the sample variance of the means (n - 1)": '''
def pixel_std_from_images(image_means, image_stds, pixel_counts):
    return ((image_stds.double() ** 2).mean(dim=0) + image_means.double().var(dim=0)).sqrt()
''',
    },
}
